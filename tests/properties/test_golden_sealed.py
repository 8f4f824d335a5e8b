"""Format 1.4 sealed golden file: tests/data/golden_v1_4_sealed.lzy is frozen.

Written once by::

    with ls.Writer(path, encryption_key=bytes(range(32)), _salt=bytes(range(0x40, 0x60)),
                   chunk_bytes=128, metadata={"step": 7}) as w:
        w.add("w", np.arange(64, dtype=np.float32).reshape(16, 4))             # codec 128, 2 chunks
        w.add("z", np.zeros((32, 4), dtype=np.float32), compression="zstd")    # codec 129, 4 chunks
        w.add("e", np.zeros((0, 2), dtype=np.int8))                            # no chunks: codec 0

with zstandard 0.25.0 (libzstd 1.5.7). Never regenerate it to make a test
pass (see test_golden.py). ``spec_open`` below reads it from
docs/format.md alone ("Sealed (encrypted) chunks", rules S1-S6), with
its own cryptography calls: HKDF, AES-GCM and HMAC, nothing of lazystore's.
It also reads format 1.5's sealed golden file, golden_v1_5_sealed.lzy
(codec 132: a codec-4 chunk, sealed; test_golden_huffman.py freezes its
bytes), whose inner chunks the spec reader's ``decode_float_planes``
decodes (§9.5).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

import ml_dtypes
import numpy as np
import pytest
import zstandard

import lazystore as ls
from tests.paths import DATA
from tests.properties.test_golden import committed, same_zstd
from tests.properties.test_golden_huffman import goldens, sealed_golden
from tests.properties.test_spec_reader import DTYPES, SpecFile, SpecVersionError, decode_float_planes

pytest.importorskip("cryptography")
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

GOLDEN = DATA / "golden_v1_4_sealed.lzy"
GOLDEN_SHA256 = "43b83a98a844a0bded7df7e783e4e99265eb73ef26c3fc33190e72227cf9d819"
GOLDEN_SIZE = 1522
KEY = bytes(range(32))
SALT = bytes(range(0x40, 0x60))
MEMBER = "__lazystore_encryption__"


def golden_tensors() -> dict[str, np.ndarray]:
    return {"w": np.arange(64, dtype=np.float32).reshape(16, 4), "z": np.zeros((32, 4), dtype=np.float32),
            "e": np.zeros((0, 2), dtype=np.int8)}


def golden_bytes() -> bytes:
    """The committed file's bytes, checked to be the committed file."""
    return committed(GOLDEN, GOLDEN_SIZE, GOLDEN_SHA256)


@same_zstd
def test_the_writer_reproduces_the_golden_bytes(tmp_path):
    path = tmp_path / "again.lzy"
    with ls.Writer(path, encryption_key=KEY, _salt=SALT, chunk_bytes=128, metadata={"step": 7}) as w:
        for name, value in golden_tensors().items():
            w.add(name, value, compression="zstd" if name == "z" else None)
    assert path.read_bytes() == golden_bytes()


def test_lazystore_reads_the_golden_file():
    golden_bytes()
    with ls.open(GOLDEN, encryption_key=KEY) as ck:
        assert ck.format_version == (1, 4) and ck.metadata == {"step": 7}
        assert [ck.info(n).compression for n in ck] == ["sealed", "sealed+zstd", None]
        for name, value in golden_tensors().items():
            np.testing.assert_array_equal(ck[name], value)
        assert ck.verify() == []
    with pytest.raises(ls.EncryptionKeyError, match="does not open"):
        ls.open(GOLDEN, encryption_key=bytes(32))


def test_a_1_1_reader_refuses_it_as_a_newer_version():
    golden_bytes()
    with pytest.raises(SpecVersionError, match=r"format 1\.4 and uses codec 128.*newer reader"):
        SpecFile(GOLDEN, reader_minor=1)


# -- the independent reader (docs/format.md only) -----------------------------------


def spec_open(blob: bytes, key: bytes) -> dict[str, np.ndarray]:
    """Every tensor of a sealed file (format 1.4 or 1.5), decrypted and
    decoded as the spec says."""
    idx_off, idx_len, _, major, minor, _, _ = struct.unpack("<QQQHHI8s", blob[-40:])
    assert (major, minor) in ((1, 4), (1, 5))
    index = blob[idx_off : idx_off + idx_len]
    esize, csize, count, ndims, nchunks, knb, mnb, _, _, _ = struct.unpack_from("<IIQQQQQIIQ", index)
    meta = json.loads(index[idx_len - mnb :])
    member = meta[MEMBER]
    assert list(meta)[-1] == MEMBER and list(member)[-1] == "index_mac"  # written last (S5)
    salt = bytes.fromhex(member["salt"])
    # the info strings say 1.4 in a 1.5 file too (§20): sealing is unchanged
    derive = lambda info, n: HKDF(SHA256(), n, salt, info).derive(key)  # noqa: E731 - three uses
    assert derive(b"lazystore 1.4 key check", 16).hex() == member["key_check"]  # S6, first
    assert index.endswith(b'"}}')  # S5: the index ends with the MAC's 64 digits, '"', '}', '}'
    zeroed = index[: idx_len - 67] + b"0" * 64 + index[idx_len - 3 :]  # and they count as ASCII zeros
    assert index[idx_len - 67 : idx_len - 3].decode() == member["index_mac"]
    mac = hmac.new(derive(b"lazystore 1.4 index mac", 32), zeroed, hashlib.sha256).hexdigest()
    assert mac == member["index_mac"]  # S6, second
    aead = AESGCM(derive(b"lazystore 1.4 aes-256-gcm", 32))
    records_at = 64 + count * esize + ndims * 8
    names = index[records_at + nchunks * csize : idx_len - mnb].decode().split("\0")[:-1]
    out, dim_at, g = {}, 64 + count * esize, 0
    for i, name in enumerate(names):
        off, _, nbytes, chunks, extent, code, codec, ndim, axis, planes, _ = struct.unpack_from(
            "<QQQQQBBBBB3s", index, 64 + i * esize)
        shape = struct.unpack_from(f"<{ndim}Q", index, dim_at)
        dim_at += 8 * ndim
        dtype = DTYPES[code]
        assert axis == 0  # what these files use: chunk c holds rows [c * extent, (c + 1) * extent)
        row = nbytes // shape[0] if shape[0] else 0
        assert codec in (128, 129, 132) or chunks == 0  # S4
        assert codec != 132 or minor >= 5  # C6
        data = bytearray()
        for c in range(chunks):
            stored = struct.unpack_from("<Q", index, records_at + g * csize)[0]
            nonce = bytes(4) + struct.pack("<Q", g)
            aad = name.encode() + b"\0" + struct.pack("<Q", c)
            plain = aead.decrypt(nonce, blob[off : off + stored], aad)  # ciphertext, then the 16-byte tag
            decoded = min(extent, shape[0] - c * extent) * row
            if codec == 132:  # the inner bytes are a codec-4 chunk (S2)
                plain = decode_float_planes(plain, code, decoded)
            data += plain if codec in (128, 132) else _planes(plain, planes, decoded // planes)
            off += stored
            g += 1
        assert len(data) == nbytes
        out[name] = np.frombuffer(bytes(data), dtype).reshape(shape)
    return out


def _planes(stored: bytes, planes: int, plane_len: int) -> bytes:
    """A codec-1 chunk (its plane lengths, then the planes), decoded: a
    plane as long as its decoded length is stored raw, a shorter one is a
    zstd frame."""
    lengths = struct.unpack_from(f"<{planes}I", stored)
    at, parts = 4 * planes, []
    for n in lengths:
        part = stored[at : at + n]
        parts.append(part if n == plane_len else zstandard.ZstdDecompressor().decompress(part))
        at += n
    return np.stack([np.frombuffer(p, np.uint8) for p in parts], axis=1).tobytes()


def test_the_spec_reader_decrypts_the_golden_file():
    read = spec_open(golden_bytes(), KEY)
    for name, value in golden_tensors().items():
        np.testing.assert_array_equal(read[name], value)


def test_the_spec_reader_agrees_with_lazystore_on_a_larger_file(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {"a": rng.standard_normal((300, 7)).astype(np.float32), "z": np.zeros((50, 9), np.float32)}
    path = tmp_path / "big.lzy"
    with ls.Writer(path, encryption_key=KEY, chunk_bytes=1000) as w:
        w.add("a", tensors["a"])
        w.add("z", tensors["z"], compression="zstd")
    for name, value in spec_open(path.read_bytes(), KEY).items():
        np.testing.assert_array_equal(value, tensors[name])


def test_the_spec_reader_decrypts_the_1_5_golden_file():
    read = spec_open(sealed_golden(), goldens.KEY)
    for name, value in goldens.sealed_tensors().items():
        assert read[name].tobytes() == value.tobytes() and read[name].dtype == value.dtype


def test_a_1_4_reader_refuses_the_1_5_file_as_a_newer_version():
    sealed_golden()
    with pytest.raises(SpecVersionError, match=r"format 1\.5 and uses codec 132.*newer reader"):
        SpecFile(goldens.SEALED, reader_minor=4, codecs=(0, 1))


def test_the_spec_reader_agrees_with_lazystore_on_a_larger_huffman_file(tmp_path):
    rng = np.random.default_rng(2)
    tensors = {"a": (rng.standard_normal((300, 7)) * 0.05).astype(ml_dtypes.bfloat16),
               "b": rng.standard_normal((90, 5)).astype(np.float32), "i": np.arange(70, dtype=np.int16)}
    path = tmp_path / "big.lzy"
    ls.save(tensors, path, compression="huffman", encryption_key=KEY, chunk_bytes=1000)
    with ls.open(path, encryption_key=KEY) as ck:
        assert [ck.info(n).compression for n in ck] == ["sealed+huffman", "sealed+huffman", "sealed+zstd"]
    for name, value in spec_open(path.read_bytes(), KEY).items():
        assert value.tobytes() == tensors[name].tobytes()
