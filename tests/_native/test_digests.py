"""Chunk digests (format 1.4, docs/format.md §10.1): ``digest=`` writes a
BLAKE3 or SHA-256 digest of every chunk's stored bytes, and verified reads
check it instead of xxh3 (rules G1-G3).

The attack they stop: a chunk changed with its xxh3 recomputed, in its
chunk record and in the trailer's index checksum. xxh3 cannot see that;
the digest can (the index itself is then anchored by a signature or a
pinned hash: issue 28's other parts)."""

from __future__ import annotations

import hashlib
import io
import json
import struct

import numpy as np
import pytest
import xxhash
from blake3 import blake3

import lazystore as ls
from lazystore._native.layout import DELTA_DIGEST_CHUNK_DTYPE, DIGEST_CHUNK_DTYPE
from tests.properties.test_hostile import Parts

ALGORITHMS = {"blake3": lambda b: blake3(b).digest(), "sha256": lambda b: hashlib.sha256(b).digest()}
DIGEST_KEY = "__lazystore_digest__"


def tensors() -> dict[str, np.ndarray]:
    return {
        "raw": np.random.default_rng(0).integers(0, 256, (8, 256), np.uint8),  # noise: stays raw
        # Compresses: each 512-byte chunk holds one value, so every chunk compresses to as many bytes.
        "packed": np.repeat(np.arange(1, 9, dtype=np.float32), 128).reshape(16, 64),
        "empty": np.zeros((0, 3), np.int8),
    }


def save(path, digest=None, **options):
    ls.save(tensors(), path, compression="zstd", chunk_bytes=512, digest=digest, **options)
    return path


def parts_of(path) -> Parts:
    return Parts.parse(path.read_bytes())


def rebuilt(p: Parts, path, minor: int) -> None:
    p.trailer["minor"] = minor
    path.write_bytes(p.build())


def tamper(src, dst, name: str, chunk: int) -> None:
    """``dst``: ``src`` with ``name``'s chunk replaced by the bytes of the
    chunk after it (as long, decoding to other values) and its xxh3
    recomputed: in its chunk record and in the trailer's index checksum
    (the digest left as it was). Every xxh3 check passes."""
    p = parts_of(src)
    minor = struct.unpack_from("<H", p.data, 10)[0]
    g = p.chunk_slice(list(tensors()).index(name)).start + chunk
    other = p.stored_chunk(g + 1)
    assert len(other) == p.chunks["stored_nbytes"][g] and other != p.stored_chunk(g)
    at = p.chunk_offset(g)
    p.data[at : at + len(other)] = other
    p.chunks["checksum"][g] = xxhash.xxh3_64_intdigest(other)
    rebuilt(p, dst, minor)


# -- writing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_digest_files_are_format_1_4_with_the_member_and_56_byte_records(tmp_path, algorithm):
    path = save(tmp_path / "d.lzy", algorithm)
    data = path.read_bytes()
    assert data[8:12] == data[-16:-12] == b"\x01\x00\x04\x00"  # 1.4, in the preamble and the trailer
    p = parts_of(path)
    assert p.chunks.dtype == DIGEST_CHUNK_DTYPE
    assert json.loads(p.metadata)[DIGEST_KEY] == {"version": 1, "algorithm": algorithm}
    # Each digest is the algorithm's of the chunk's stored bytes (rule G2), raw and compressed alike.
    for g in range(len(p.chunks)):
        assert p.chunks["digest"][g].tobytes() == ALGORITHMS[algorithm](p.stored_chunk(g))
        assert p.chunks["base_checksum"][g] == 0
    with ls.open(path) as ck:
        assert ck.format_version == (1, 4)
        assert ck.system_metadata[DIGEST_KEY]["algorithm"] == algorithm
        assert {ck.info(n).compression for n in ck} == {None, "zstd"}
        assert ck.verify() == []
    for name, want in ls.load(path).items():
        assert want.tobytes() == tensors()[name].tobytes()


def test_a_file_without_digests_is_written_as_before(tmp_path):
    # 16-byte records, no member, the oldest minor the tensors need (1.0 here).
    path = save(tmp_path / "plain.lzy")
    data = path.read_bytes()
    assert data[8:12] == data[-16:-12] == b"\x01\x00\x00\x00"
    p = parts_of(path)
    assert p.chunks.dtype.itemsize == 16 and DIGEST_KEY not in json.loads(p.metadata or b"{}")
    # The same tensors with digests differ only by the records' digests and the member.
    with_digests = parts_of(save(tmp_path / "d.lzy", "sha256"))
    assert bytes(with_digests.data[16:]) == bytes(p.data[16:])
    assert (with_digests.chunks["checksum"] == p.chunks["checksum"]).all()


def test_the_writer_states_1_4_from_the_start(tmp_path):
    # An upload cannot rewrite its preamble: a Writer with digest= knows at construction.
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://digests/{tmp_path.name}.lzy"
    with ls.Writer(url, digest="blake3") as w:
        w.add("a", np.ones(4, np.float32))
    data = fsspec.filesystem("memory").cat_file(url)
    assert data[8:12] == data[-16:-12] == b"\x01\x00\x04\x00"
    assert ls.load(url)["a"].tolist() == [1.0] * 4


@pytest.mark.parametrize("digest", ["md5", "BLAKE2", 3, b"sha256"])
def test_an_unknown_digest_is_refused_before_anything_is_written(tmp_path, digest):
    with pytest.raises(ls.InvalidInputError, match="digest must be None, 'blake3' or 'sha256'"):
        ls.save({"a": np.ones(2)}, tmp_path / "x.lzy", digest=digest)
    assert list(tmp_path.iterdir()) == []


def test_without_the_blake3_package_a_blake3_save_names_the_extra(tmp_path, monkeypatch):
    import sys

    from lazystore._core import crypto_digest

    monkeypatch.setitem(sys.modules, "blake3", None)  # import blake3 now fails
    monkeypatch.setattr(crypto_digest, "_made", {})
    with pytest.raises(ls.MissingDependencyError, match=r"pip install 'lazystore-ml\[crypto\]'"):
        ls.save({"a": np.ones(2)}, tmp_path / "x.lzy", digest="blake3")
    ls.save({"a": np.ones(2)}, tmp_path / "s.lzy", digest="sha256")  # hashlib's: no extra needed
    assert ls.load(tmp_path / "s.lzy")["a"].tolist() == [1.0, 1.0]


# -- rule G2: a tampered chunk with its xxh3 recomputed ---------------------------------------


def _read_every_verified_way(path, name: str):
    """Each verified read of ``name``, as a callable."""
    return {
        "load": lambda: ls.load(path),
        "load one": lambda: ls.load(path, keys=[name]),
        "open(verify=True)[name]": lambda: _with(ls.open(path, verify=True), lambda ck: ck[name]),
        "get_slice": lambda: _with(ls.open(path, verify=True), lambda ck: ck.get_slice(name)[0:16]),
        "view.load": lambda: _with(ls.open(path), lambda ck: ck.load()),
        "fetched": lambda: _with(ls.open(io.BytesIO(path.read_bytes()), verify=True), lambda ck: ck[name]),
        "fetched load": lambda: ls.load(io.BytesIO(path.read_bytes())),
    }


def _with(ck, fn):
    with ck:
        return fn(ck)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("name", ["raw", "packed"])
def test_a_chunk_tampered_with_its_xxh3_recomputed_raises_digest_error(tmp_path, algorithm, name):
    bad = tmp_path / "bad.lzy"
    tamper(save(tmp_path / "d.lzy", algorithm), bad, name, 1)
    for way, read in _read_every_verified_way(bad, name).items():
        with pytest.raises(ls.DigestError, match=rf"{algorithm} digest mismatch in tensor '{name}' chunk 1") as exc:
            read()
        assert isinstance(exc.value, ls.ChecksumError), way
    with ls.open(bad) as ck:
        assert ck.verify() == [name]
        assert ck.verify([n for n in ck if n != name]) == []


@pytest.mark.parametrize("name", ["raw", "packed"])
def test_xxh3_alone_misses_that_tamper(tmp_path, name):
    # The same tamper in a file without digests passes every check: what digests are for.
    bad = tmp_path / "bad.lzy"
    tamper(save(tmp_path / "plain.lzy"), bad, name, 1)
    for read in _read_every_verified_way(bad, name).values():
        read()
    with ls.open(bad) as ck:
        assert ck.verify() == []
        assert ck[name].tobytes() != tensors()[name].tobytes()


def test_unverified_reads_of_a_digest_file_check_xxh3_as_before(tmp_path):
    # Digests cost a cryptographic hash: only a verified read pays it. An
    # unverified read checks what it checked before (compressed chunks' xxh3).
    path = save(tmp_path / "d.lzy", "blake3")
    bad = tmp_path / "bad.lzy"
    tamper(path, bad, "packed", 0)
    with ls.open(bad) as ck:
        assert ck["packed"].tobytes() != tensors()["packed"].tobytes()
        assert ck["raw"].tobytes() == tensors()["raw"].tobytes()
    flipped = bytearray(path.read_bytes())
    with ls.open(path) as ck:
        at = ck.info("packed").offset + 3
    flipped[at] ^= 0x10  # no xxh3 recomputed: the xxh3 check still catches it
    (tmp_path / "flip.lzy").write_bytes(bytes(flipped))
    with ls.open(tmp_path / "flip.lzy") as ck, pytest.raises(ls.ChecksumError) as exc:
        ck["packed"]
    assert not isinstance(exc.value, ls.DigestError)


def test_a_tampered_digest_is_caught_too(tmp_path):
    # The bytes intact, the recorded digest changed (and the index checksum fixed).
    path = save(tmp_path / "d.lzy", "sha256")
    p = parts_of(path)
    p.chunks["digest"][0][0] ^= 1
    rebuilt(p, tmp_path / "bad.lzy", 4)
    with pytest.raises(ls.DigestError, match="tensor 'raw' chunk 0"):
        ls.load(tmp_path / "bad.lzy")


# -- rule G1 on open ---------------------------------------------------------------------------


def _with_member(path, dst, member, *, minor=4, records=None) -> None:
    p = parts_of(path)
    meta = json.loads(p.metadata or b"{}")
    meta[DIGEST_KEY] = member
    p.metadata = json.dumps(meta).encode()
    if records is not None:
        p.chunks = records(p.chunks)
    struct.pack_into("<H", p.data, 10, minor)
    rebuilt(p, dst, minor)


def _narrow(chunks):
    out = np.zeros(len(chunks), [("stored_nbytes", "<u8"), ("checksum", "<u8")])
    out["stored_nbytes"], out["checksum"] = chunks["stored_nbytes"], chunks["checksum"]
    return out


@pytest.mark.parametrize("member, minor, records, why", [
    ({"version": 1, "algorithm": "blake3"}, 4, _narrow, "chunk records are narrower than 56 bytes"),
    ({"version": 2, "algorithm": "blake3"}, 4, None, "has version 2, not 1"),
    ({"version": "1", "algorithm": "blake3"}, 5, None, "has version '1', not 1"),
    ({"version": 1, "algorithm": "blake3"}, 3, None, "in a format 1.3 file"),
    ({"version": 1}, 4, None, "names no algorithm"),
    (["blake3"], 4, None, "is not a JSON object"),
], ids=["narrow-records", "version-2", "version-string", "in-1.3", "no-algorithm", "not-object"])
def test_rule_g1_refuses_a_bad_declaration_on_open(tmp_path, member, minor, records, why):
    _with_member(save(tmp_path / "d.lzy", "blake3"), tmp_path / "bad.lzy", member, minor=minor, records=records)
    with pytest.raises(ls.FormatError, match=rf"__lazystore_digest__ .*{why}.*rule G1") as exc:
        ls.open(tmp_path / "bad.lzy")
    assert not isinstance(exc.value, ls.UnsupportedVersionError)


@pytest.mark.parametrize("member, minor", [({"version": 1, "algorithm": "sha3-256"}, 4),
                                           ({"version": 2, "algorithm": "blake3"}, ls.FORMAT_MINOR + 1)],
                         ids=["unknown-algorithm", "newer-member-version"])
def test_digests_this_lazystore_cannot_check_refuse_verification_only(tmp_path, member, minor):
    path = save(tmp_path / "d.lzy", "blake3")
    odd = tmp_path / "odd.lzy"
    _with_member(path, odd, member, minor=minor)
    with ls.open(odd) as ck:  # read as an older reader reads it: xxh3 checked, digests skipped
        assert ck["packed"].tobytes() == tensors()["packed"].tobytes()
        assert ls.load(odd, verify=False)["raw"].tobytes() == tensors()["raw"].tobytes()
        with pytest.raises(ls.UnsupportedVersionError, match="cannot check the chunk digests.*upgrade"):
            ck.verify()
        with pytest.raises(ls.UnsupportedVersionError, match="cannot check the chunk digests"):
            ck.load()
    with pytest.raises(ls.UnsupportedVersionError, match="cannot check the chunk digests"):
        ls.open(odd, verify=True)
    with pytest.raises(ls.UnsupportedVersionError):
        ls.load(odd)


def test_records_wider_than_the_member_needs_read(tmp_path):
    # A newer minor may append fields after the digests (docs/format.md §14).
    path = save(tmp_path / "d.lzy", "sha256")
    p = parts_of(path)
    wide = np.zeros(len(p.chunks), np.dtype(DIGEST_CHUNK_DTYPE.descr + [("later", "<u8")]))
    for field in DIGEST_CHUNK_DTYPE.names:
        wide[field] = p.chunks[field]
    p.chunks = wide
    rebuilt(p, tmp_path / "wide.lzy", 4)
    assert ls.load(tmp_path / "wide.lzy")["raw"].tobytes() == tensors()["raw"].tobytes()
    with ls.open(tmp_path / "wide.lzy") as ck:
        assert ck.verify() == []


# -- deltas: base digests (rule G3) ------------------------------------------------------------


def _delta_pair(tmp_path, digest):
    base = {"w": np.linspace(0, 1, 4096, dtype=np.float32).reshape(64, 64)}
    new = {"w": base["w"] + np.float32(1e-3) * (np.arange(64 * 64).reshape(64, 64) % 7 == 0)}
    ls.save(base, tmp_path / "base.lzy", chunk_bytes=1024, digest=digest)
    ls.save(new, tmp_path / "delta.lzy", chunk_bytes=1024, base=tmp_path / "base.lzy", digest=digest)
    return base, new


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_delta_records_the_digest_of_each_decoded_base_chunk(tmp_path, algorithm):
    base, new = _delta_pair(tmp_path, algorithm)
    p = parts_of(tmp_path / "delta.lzy")
    assert p.chunks.dtype == DELTA_DIGEST_CHUNK_DTYPE
    with ls.open(tmp_path / "delta.lzy") as ck:
        assert ck.info("w").compression == "delta" and ck.format_version == (1, 4)
        assert ck.verify() == []
    rows = base["w"].reshape(16, -1)  # 1024-byte chunks: 4 rows of 64 float32
    for c in range(16):
        assert p.chunks["base_digest"][c].tobytes() == ALGORITHMS[algorithm](rows[c].tobytes())
        assert p.chunks["base_checksum"][c] == xxhash.xxh3_64_intdigest(rows[c].tobytes())
    assert ls.load(tmp_path / "delta.lzy")["w"].tobytes() == new["w"].tobytes()


def test_a_base_changed_with_its_xxh3s_recomputed_is_caught_by_the_base_digest(tmp_path):
    # The base rewritten with other content and every xxh3 in both files made
    # to agree (the delta's base checksum included): only G3 sees it.
    _delta_pair(tmp_path, "blake3")
    tamper_base = parts_of(tmp_path / "base.lzy")
    g, at = 2, tamper_base.chunk_offset(2) + 8
    tamper_base.data[at] ^= 0x01
    tamper_base.chunks["checksum"][g] = xxhash.xxh3_64_intdigest(tamper_base.stored_chunk(g))
    tamper_base.chunks["digest"][g] = np.frombuffer(blake3(tamper_base.stored_chunk(g)).digest(), np.uint8)
    changed = tamper_base.stored_chunk(g)
    rebuilt(tamper_base, tmp_path / "base.lzy", 4)
    delta = parts_of(tmp_path / "delta.lzy")
    delta.chunks["base_checksum"][g] = xxhash.xxh3_64_intdigest(changed)
    rebuilt(delta, tmp_path / "delta.lzy", 4)
    with ls.open(tmp_path / "delta.lzy") as ck:
        ck["w"]  # unverified: xxh3 agrees everywhere
        with pytest.raises(ls.BaseCheckpointError, match=r"tensor 'w' chunk 2 was coded against base bytes of "
                                                         r"blake3 [0-9a-f]{64}"):
            ck.verify()
    with pytest.raises(ls.BaseCheckpointError, match="blake3"):
        ls.load(tmp_path / "delta.lzy")


def test_codec_3_in_a_digest_file_needs_base_digests(tmp_path):
    _delta_pair(tmp_path, "sha256")
    p = parts_of(tmp_path / "delta.lzy")
    narrow = np.zeros(len(p.chunks), DIGEST_CHUNK_DTYPE)
    for field in DIGEST_CHUNK_DTYPE.names:
        narrow[field] = p.chunks[field]
    p.chunks = narrow
    rebuilt(p, tmp_path / "bad.lzy", 4)
    with ls.open(tmp_path / "bad.lzy") as ck, pytest.raises(ls.FormatError, match="without base digests"):
        ck["w"]
