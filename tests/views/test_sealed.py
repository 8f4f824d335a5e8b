"""Encrypted checkpoints (format 1.4, sealed codecs 128 and 129), through
the public API: what round-trips, what needs the key, and that every
tampering the design lists is refused with a lazystore error naming what
was hit, never garbage."""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pytest
import xxhash

import lazystore as ls
from lazystore._core import aead
from lazystore._native.layout import INDEX_HEADER, TRAILER
from lazystore.views import chunk_reader

pytest.importorskip("cryptography")

KEY = bytes(range(32))
OTHER = bytes(32)


@pytest.fixture
def tensors():
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((64, 100)).astype(np.float32),  # 4 raw chunks of 16 rows
        "ids": (np.arange(4000) % 7).astype(np.int64),  # compresses: sealed zstd
        "empty": np.zeros((0, 3), np.float16),
        "scalar": np.array(3.5),
    }


@pytest.fixture
def sealed(tmp_path, tensors):
    path = tmp_path / "sealed.lzy"
    with ls.Writer(path, encryption_key=KEY, chunk_bytes=6400, metadata={"run": "a"}) as w:
        for name, value in tensors.items():
            w.add(name, value, compression="zstd" if name == "ids" else None)
    return path


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
        assert got[name].dtype == value.dtype


# -- reading with the key ------------------------------------------------------------


@pytest.mark.parametrize("mmap", [True, False])
def test_an_encrypted_file_reads_back_with_its_key(sealed, tensors, mmap):
    with ls.open(sealed, encryption_key=KEY, mmap=mmap) as ck:
        assert ck.format_version == (1, 4)
        _same({n: ck[n] for n in ck}, tensors)
        _same(ck.load(), tensors)
        np.testing.assert_array_equal(ck.get_slice("w")[10:30, 5], tensors["w"][10:30, 5])
        assert ck.verify() == []
        assert [ck.info(n).compression for n in ck] == ["sealed", "sealed+zstd", None, "sealed"]


def test_from_bytes_and_from_a_file_object(sealed, tensors):
    with ls.open(io.BytesIO(sealed.read_bytes()), encryption_key=KEY) as ck:
        _same(ck.load(), tensors)
    with sealed.open("rb") as f, ls.open(f, encryption_key=KEY) as ck:
        _same(ck.load(), tensors)


def test_ls_save_and_load_with_a_callable_key_called_once_each(tmp_path, tensors):
    calls = []

    def kms():
        calls.append(1)
        return KEY

    path = tmp_path / "m.lzy"
    ls.save(tensors, path, encryption_key=kms, compression="zstd")
    assert calls == [1]
    _same(ls.load(path, encryption_key=kms), tensors)
    assert calls == [1, 1]


def test_a_sealed_tensor_is_a_decrypted_copy_never_a_view_of_the_file(sealed, tensors):
    with ls.open(sealed, encryption_key=KEY) as ck:
        w = ck["w"]
        assert w.flags.writeable  # a raw tensor of a plain file is a read-only view of its map
        w[:] = 0
        np.testing.assert_array_equal(ck["w"], tensors["w"])


def test_ciphertext_is_what_the_file_holds(sealed, tensors):
    blob = sealed.read_bytes()
    assert tensors["w"][:16].tobytes() not in blob  # the first chunk's plaintext is nowhere
    with ls.open(sealed) as ck:
        assert ck.info("w").stored_nbytes == tensors["w"].nbytes + 4 * aead.TAG_BYTES


def test_get_slice_of_ten_rows_opens_one_chunk(tmp_path, monkeypatch):
    big = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)  # 4 MiB in 1 MiB chunks
    path = tmp_path / "big.lzy"
    ls.save({"big": big}, path, encryption_key=KEY, chunk_bytes=1 << 20)
    opened = []
    real = aead.Opener.open_into

    def counting(self, blob, target, name, c, g):
        opened.append(c)
        real(self, blob, target, name, c, g)

    monkeypatch.setattr(aead.Opener, "open_into", counting)
    with ls.open(path, encryption_key=KEY) as ck:
        assert ck.info("big").chunk_count == 4
        np.testing.assert_array_equal(ck.get_slice("big")[2000:2010], big[2000:2010])
    assert opened == [1]


# -- without the key, with the wrong one ---------------------------------------------------


def test_names_shapes_and_metadata_need_no_key(sealed, tensors):
    with ls.open(sealed) as ck:
        assert list(ck) == list(tensors)
        assert ck.info("w").shape == (64, 100) and ck.metadata == {"run": "a"}
        assert ck["empty"].shape == (0, 3)  # no chunks: nothing is sealed
        assert ck.verify() == []  # the stored ciphertext's checksums
        with pytest.raises(ls.EncryptionKeyError, match=r"tensor 'w' of .*sealed.lzy is encrypted"):
            ck["w"]
        with pytest.raises(ls.EncryptionKeyError, match="tensor 'ids'"):
            ck.get_slice("ids")[:3]
    with pytest.raises(ls.EncryptionKeyError, match="tensor 'w'"):
        ls.load(sealed)


def test_a_wrong_key_is_refused_on_open(sealed):
    with pytest.raises(ls.EncryptionKeyError, match=r"this key does not open .*sealed.lzy"):
        ls.open(sealed, encryption_key=OTHER)


def test_a_plaintext_file_is_refused_when_a_key_is_given(tmp_path, tensors):
    path = tmp_path / "plain.lzy"
    ls.save(tensors, path)  # a file substituted for the encrypted one
    with pytest.raises(ls.EncryptionKeyError, match=r"plain.lzy is not encrypted"):
        ls.load(path, encryption_key=KEY)


# -- tampering -----------------------------------------------------------------------------


def _trailer(blob) -> tuple[int, int]:
    """The index's offset and length."""
    offset, length = TRAILER.unpack_from(blob, len(blob) - TRAILER.size)[:2]
    return offset, length


def _rewrite(path, edit) -> None:
    """Apply ``edit`` to the file's bytes (a bytearray, in place, lengths
    unchanged), then recompute the trailer's xxh3 of the index: what anyone
    who can write the file can do."""
    blob = bytearray(path.read_bytes())
    edit(blob)
    offset, length = _trailer(blob)
    checksum = xxhash.xxh3_64_intdigest(blob[offset : offset + length])
    struct.pack_into("<Q", blob, len(blob) - TRAILER.size + 16, checksum)
    _write(path, bytes(blob))


def _record(blob, g: int) -> int:
    """Where the file's chunk record ``g`` is."""
    offset, _ = _trailer(blob)
    entry_size, record_size, tensors, dims = INDEX_HEADER.unpack_from(blob, offset)[:4]
    return offset + INDEX_HEADER.size + tensors * entry_size + dims * 8 + g * record_size


def _chunk_at(path, name: str, c: int) -> tuple[int, int]:
    with ls.open(path) as ck:
        info = ck.info(name)
    stored = info.stored_nbytes // info.chunk_count  # the tests' tensors have equal chunks
    return info.offset + c * stored, stored


def _write(path, blob: bytes):
    path.unlink()  # never rewrite a file a view may still map
    path.write_bytes(blob)


def _swap_chunks_0_and_1(path) -> None:
    a, n = _chunk_at(path, "w", 0)
    b, _ = _chunk_at(path, "w", 1)
    blob = bytearray(path.read_bytes())
    blob[a : a + n], blob[b : b + n] = blob[b : b + n], blob[a : a + n]
    _write(path, bytes(blob))


def test_swapping_two_chunks_is_detected(sealed):
    _swap_chunks_0_and_1(sealed)
    with ls.open(sealed, encryption_key=KEY) as ck, pytest.raises(ls.ChecksumError, match="tensor 'w' chunk 0"):
        ck["w"]


def test_a_swap_that_passes_xxh3_fails_the_tag(sealed, monkeypatch):
    """An attacker who also defeats xxh3 (say, by a collision) still fails
    the tag: the nonce and associated data are the chunk's place."""
    _swap_chunks_0_and_1(sealed)
    monkeypatch.setattr(chunk_reader.ChunkReader, "_check", lambda self, *args, **kwargs: None)
    with ls.open(sealed, encryption_key=KEY) as ck:
        with pytest.raises(ls.DecryptionError, match=r"tensor 'w' chunk [01]: authentication failed"):
            ck["w"]
        assert ck.verify() == ["w"]


def test_a_tampered_chunk_with_its_checksums_recomputed_is_refused(sealed, monkeypatch):
    """Flip a ciphertext byte and rewrite the chunk's xxh3 and the trailer's:
    the index MAC refuses the file on open; and were the MAC not checked,
    the tag would refuse the chunk, naming it."""
    mac = json.loads(_metadata(sealed))[aead.ENCRYPTION_KEY]["index_mac"]
    start, n = _chunk_at(sealed, "w", 2)

    def tamper(blob):
        blob[start + 5] ^= 1
        struct.pack_into("<Q", blob, _record(blob, 2) + 8, xxhash.xxh3_64_intdigest(blob[start : start + n]))

    _rewrite(sealed, tamper)
    with ls.open(sealed) as ck:
        assert ck.verify() == []  # xxh3 alone is fooled
    with pytest.raises(ls.DecryptionError, match=r"index of .*sealed.lzy was modified"):
        ls.open(sealed, encryption_key=KEY)
    monkeypatch.setattr(aead.FileKeys, "index_mac", lambda self, index: mac)  # as if the MAC were not checked
    with ls.open(sealed, encryption_key=KEY) as ck, \
            pytest.raises(ls.DecryptionError, match="tensor 'w' chunk 2: authentication failed"):
        ck["w"]


def _metadata(path) -> bytes:
    blob = path.read_bytes()
    offset, length = _trailer(blob)
    metadata_nbytes = INDEX_HEADER.unpack_from(blob, offset)[6]
    return blob[offset + length - metadata_nbytes : offset + length]


def _shorten_last_chunk_of_w(blob) -> None:
    """w's last chunk loses its tag, as its record says."""
    at = _record(blob, 3)
    struct.pack_into("<Q", blob, at, struct.unpack_from("<Q", blob, at)[0] - aead.TAG_BYTES)


@pytest.mark.parametrize("edit", [
    _shorten_last_chunk_of_w,  # truncating a chunk: its record changes (or its bytes no longer match)
    lambda blob: blob.__setitem__(slice(blob.index(b'"run":"a"'), blob.index(b'"run":"a"') + 9), b'"run":"b"'),
    lambda blob: blob.__setitem__(slice(blob.index(b"ids\0"), blob.index(b"ids\0") + 4), b"idz\0"),  # a rename
], ids=["truncated chunk", "edited metadata", "renamed tensor"])
def test_an_edited_index_fails_the_mac(sealed, edit):
    _rewrite(sealed, edit)
    with ls.open(sealed) as ck:
        list(ck)  # without the key nothing is authenticated
    with pytest.raises(ls.DecryptionError, match="index of .*sealed.lzy was modified"):
        ls.open(sealed, encryption_key=KEY)


# -- every save path ---------------------------------------------------------------------------


def test_a_sharded_save_seals_each_shard_under_its_own_salt(tmp_path, tensors):
    folder = tmp_path / "shards"
    ls.save(tensors, folder, max_shard_size=20_000, encryption_key=KEY)
    shards = sorted(folder.glob("*.lzy"))
    assert len(shards) > 1
    salts = set()
    for shard in shards:
        with ls.open(shard) as ck:
            salts.add(ck.system_metadata[aead.ENCRYPTION_KEY]["salt"])
    assert len(salts) == len(shards)
    _same(ls.load(folder, encryption_key=KEY), tensors)
    with pytest.raises(ls.EncryptionKeyError, match="does not open"):
        ls.open(folder, encryption_key=OTHER)


@pytest.mark.parametrize(("target", "options", "why"), [
    ("m.safetensors", {}, "an encrypted checkpoint .* is a lazystore file"),
    ("m.lzy", {"base": "base.lzy"}, "sealed deltas are not supported"),
])
def test_what_cannot_be_encrypted_is_refused(tmp_path, tensors, target, options, why):
    if "base" in options:
        ls.save(tensors, tmp_path / "base.lzy")
        options = {"base": tmp_path / "base.lzy"}
    with pytest.raises(ls.InvalidInputError, match=why):
        ls.save(tensors, tmp_path / target, encryption_key=KEY, **options)
    assert not (tmp_path / target).exists()


def test_an_upload_states_1_4_from_its_first_bytes(tensors):
    path = "memory://sealed/m.lzy"
    ls.save(tensors, path, encryption_key=KEY)
    with ls.open(path, encryption_key=KEY) as ck:
        assert ck.format_version == (1, 4)
        _same(ck.load(), tensors)


def test_checkpoint_manager_encrypts_and_refuses_deltas(tmp_path, tensors):
    with pytest.raises(ls.InvalidInputError, match="sealed .* deltas are not supported"):
        ls.CheckpointManager(tmp_path / "d", delta=True, encryption_key=KEY)
    with ls.CheckpointManager(tmp_path / "c", keep_last=2, encryption_key=lambda: KEY) as mgr:
        mgr.save(1, tensors)
        mgr.save(2, tensors)
        _same(mgr.restore(), tensors)
        with mgr.open() as ck:
            assert ck.info("w").compression == "sealed"
        assert mgr.damaged() == {}
    with pytest.raises(ls.EncryptionKeyError):
        ls.load(mgr.path(2))


def test_torch_save_file_load_file_and_safe_open(tmp_path):
    torch = pytest.importorskip("torch")
    from lazystore.torch import load_file, load_model, save_file, save_model

    state = {"w": torch.arange(12.0).reshape(3, 4), "b": torch.ones(4)}
    path = tmp_path / "t.lzy"
    save_file(state, path, encryption_key=KEY)
    loaded = load_file(path, encryption_key=KEY)
    assert all(torch.equal(loaded[n], state[n]) for n in state)
    with ls.safe_open(path, "pt", encryption_key=KEY) as f:
        assert torch.equal(f.get_tensor("w"), state["w"]) and torch.equal(f.get_slice("w")[1:], state["w"][1:])
    with pytest.raises(ls.EncryptionKeyError):
        load_file(path)
    model = torch.nn.Linear(4, 3)
    save_model(model, tmp_path / "model.lzy", encryption_key=KEY)
    fresh = torch.nn.Linear(4, 3)
    load_model(fresh, tmp_path / "model.lzy", encryption_key=KEY)
    assert torch.equal(fresh.weight, model.weight)


def test_lazystore_numpy_save_file_and_load_file(tmp_path, tensors):
    from lazystore.numpy import load_file, save_file

    path = tmp_path / "np.lzy"
    save_file({"w": tensors["w"]}, path, encryption_key=KEY)
    np.testing.assert_array_equal(load_file(path, encryption_key=KEY)["w"], tensors["w"])
    with pytest.raises(ls.EncryptionKeyError):
        load_file(path)


def test_convert_writes_a_copy_of_an_encrypted_file_in_plaintext(sealed, tmp_path, tensors):
    from lazystore.interop import to_lazystore

    out = tmp_path / "plain.lzy"
    with ls.open(sealed, encryption_key=KEY) as ck:
        to_lazystore(ck, out)
    with ls.open(out) as ck:
        assert aead.ENCRYPTION_KEY not in ck.system_metadata
        assert ck.info("ids").compression == "zstd"
        _same(ck.load(), tensors)


def test_digests_cover_the_sealed_bytes_and_check_without_the_key(tmp_path, tensors):
    path = tmp_path / "both.lzy"
    ls.save(tensors, path, encryption_key=KEY, digest="sha256", chunk_bytes=6400)
    with ls.open(path, verify=True) as ck:  # no key: the digests of the stored ciphertext
        assert ck.verify() == []
    start, _ = _chunk_at(path, "w", 1)
    _rewrite(path, lambda blob: blob.__setitem__(start, blob[start] ^ 1))
    with ls.open(path, verify=True) as ck:
        assert ck.verify() == ["w"]
    with ls.open(path, encryption_key=KEY, verify=True) as ck, pytest.raises(ls.DigestError, match="tensor 'w'"):
        ck["w"]


@pytest.mark.parametrize("target", ["local", "memory://sealed/windows.lzy"])
def test_many_windows_each_sealed_in_the_reused_buffer(tmp_path, monkeypatch, target):
    """The writer seals a window at a time into one buffer it reuses: every
    window must be written before the next overwrites it, locally and in an upload."""
    from lazystore.writing import writer

    monkeypatch.setattr(writer, "WINDOW_BYTES", 4096)
    w = np.random.default_rng(2).standard_normal((512, 64)).astype(np.float32)  # 128 KiB: 32 windows
    path = tmp_path / "windows.lzy" if target == "local" else target
    ls.save({"w": w, "z": np.zeros((512, 64), np.float32)}, path, encryption_key=KEY, compression="zstd",
            chunk_bytes=1024)
    _same(ls.load(path, encryption_key=KEY), {"w": w, "z": np.zeros((512, 64), np.float32)})
