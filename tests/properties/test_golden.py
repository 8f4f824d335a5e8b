"""Format v1 golden file: the bytes of tests/data/golden_v1.lzy are frozen.

The file was generated once, by ``ls.save(golden_tensors(), path,
compression="zstd", metadata={"step": 7})`` with lazystore 0.1.0 and
zstandard 0.25.0 (libzstd 1.5.7), and committed. Never regenerate it to make
these tests pass: a failure means that files written today differ from files
written before (writer drift), or that old files no longer read back the same
(reader drift). A deliberate format change gets a new golden file
(golden_v2.lzy, ...) and keeps this one, which must go on reading.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import zstandard

import lazystore as ls
from tests.paths import DATA

GOLDEN = DATA / "golden_v1.lzy"
GOLDEN_SHA256 = "31b0449b421b8226079e88630ea30ced97dd6b1fe4d9f94933ab19c72e96e6b3"
GOLDEN_SIZE = 832
GOLDEN_ZSTD = (1, 5, 7)  # the libzstd that compressed the "zeros" tensor
MAGIC = b"\x89LZY\r\n\x1a\n"


def golden_tensors() -> dict[str, np.ndarray]:
    return {
        "weight": np.arange(6, dtype=np.float32).reshape(2, 3),
        "bias": np.array([1, -2], dtype=np.int64),
        "emb": np.array(
            [[0.5, -1.0], [2.0, 3.25], [-0.125, 100.0], [0.0, -7.5]], dtype=ml_dtypes.bfloat16
        ),
        "zeros": np.zeros((64, 4), dtype=np.float32),  # the only one zstd shrinks
    }


GOLDEN_METADATA = {"step": 7}


# Only the libzstd that wrote the golden file is guaranteed to compress the
# "zeros" chunk to the same bytes; reading the file is tested everywhere.
same_zstd = pytest.mark.skipif(
    zstandard.ZSTD_VERSION != GOLDEN_ZSTD,
    reason=f"golden bytes were compressed by libzstd {GOLDEN_ZSTD}, this is {zstandard.ZSTD_VERSION}",
)


def committed(path: Path, size: int, sha256: str) -> bytes:
    """A golden file's bytes, checked to be the committed file itself: if
    this fails, the file was changed, not the code."""
    data = path.read_bytes()
    assert len(data) == size
    assert hashlib.sha256(data).hexdigest() == sha256
    return data


@pytest.fixture(scope="module")
def golden() -> bytes:
    return committed(GOLDEN, GOLDEN_SIZE, GOLDEN_SHA256)


# --- (a) the writer still produces exactly these bytes ------------------------------


@same_zstd
def test_writer_reproduces_golden_bytes(golden, tmp_path):
    path = tmp_path / "again.lzy"
    ls.save(golden_tensors(), path, compression="zstd", metadata=GOLDEN_METADATA)
    written = path.read_bytes()
    if written != golden:
        first = next(
            (i for i, (a, b) in enumerate(zip(written, golden)) if a != b), min(len(written), len(golden))
        )
        pytest.fail(
            f"the writer's output drifted from format v1's golden file: {len(written)} bytes vs "
            f"{len(golden)}, first difference at byte {first} "
            f"(libzstd here {zstandard.ZSTD_VERSION}, golden written with {GOLDEN_ZSTD}; bytes "
            f"256-347 are the zstd-compressed 'zeros' chunk)"
        )


@same_zstd
def test_writer_with_writer_api_reproduces_golden_bytes(golden, tmp_path):
    path = tmp_path / "again.lzy"
    with ls.Writer(path, compression="zstd", metadata=GOLDEN_METADATA) as w:
        for name, arr in golden_tensors().items():
            w.add(name, arr)
    assert path.read_bytes() == golden


# --- (b) the reader still reads them as before ----------------------------------------


def test_golden_file_reads_back_exactly(golden):
    expected = golden_tensors()
    with ls.open(GOLDEN) as ck:
        assert list(ck) == list(expected)  # order of the file is kept
        assert ck.metadata == GOLDEN_METADATA
        assert ck.format_version == (1, 0)
        assert ck.verify() == []
        for name, want in expected.items():
            got = ck[name]
            assert got.dtype == want.dtype, name
            assert got.shape == want.shape, name
            assert got.tobytes() == want.tobytes(), name
        assert ck.get_slice("zeros")[10:12].tobytes() == bytes(32)
        assert ck.get_slice("weight")[1].tolist() == [3.0, 4.0, 5.0]


def test_golden_file_infos():
    with ls.open(GOLDEN) as ck:
        infos = {name: ck.info(name) for name in ck}
    expected = {
        # name: (dtype, shape, nbytes, stored_nbytes, compression, chunk_count, offset)
        "weight": (np.dtype("<f4"), (2, 3), 24, 24, None, 1, 64),
        "bias": (np.dtype("<i8"), (2,), 16, 16, None, 1, 128),
        "emb": (np.dtype(ml_dtypes.bfloat16), (4, 2), 16, 16, None, 1, 192),
        "zeros": (np.dtype("<f4"), (64, 4), 1024, 92, "zstd", 1, 256),
    }
    for name, (dtype, shape, nbytes, stored, compression, chunks, offset) in expected.items():
        info = infos[name]
        assert info.name == name
        assert info.dtype == dtype
        assert info.shape == shape
        assert info.nbytes == nbytes
        assert info.stored_nbytes == stored
        assert info.compression == compression
        assert info.chunk_count == chunks
        assert info.offset == offset


def test_golden_file_loads_with_load():
    loaded = ls.load(GOLDEN)
    for name, want in golden_tensors().items():
        assert loaded[name].dtype == want.dtype
        np.testing.assert_array_equal(loaded[name], want)
    assert ls.load(GOLDEN, keys=["bias"])["bias"].tolist() == [1, -2]


# --- (c) bytes at fixed offsets -----------------------------------------------------------


def test_golden_preamble_bytes(golden):
    assert golden[0:8] == MAGIC == bytes([0x89, 0x4C, 0x5A, 0x59, 0x0D, 0x0A, 0x1A, 0x0A])
    assert golden[8:10] == b"\x01\x00"  # major 1, little-endian u16
    assert golden[10:12] == b"\x00\x00"  # minor 0
    assert golden[12:16] == bytes(4)  # reserved
    assert golden[16:64] == bytes(48)  # zero padding to the first 64-aligned tensor


def test_golden_tensor_bytes(golden):
    assert golden[64:88] == np.arange(6, dtype="<f4").tobytes()  # weight, raw
    assert golden[88:128] == bytes(40)
    assert golden[128:144] == struct.pack("<qq", 1, -2)  # bias, raw
    assert golden[192:208] == bytes.fromhex("003f80bf00405040" "00bec8420000f0c0")  # emb, bfloat16
    # zeros: one zstd chunk of 4 byte planes; a header of 4 u32 plane lengths
    # (19 each), then four zstd frames, then padding to the index at 384.
    assert golden[256:272] == struct.pack("<4I", 19, 19, 19, 19)
    for plane in range(4):
        start = 272 + 19 * plane
        assert golden[start : start + 4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic
    assert golden[348:384] == bytes(36)


def test_golden_index_bytes(golden):
    index = golden[384 : 384 + 408]
    # header: entry size, chunk record size, tensors, dims, chunks, key bytes,
    # metadata bytes, alignment, reserved x2
    assert struct.unpack_from("<IIQQQQQIIQ", index, 0) == (48, 16, 4, 7, 4, 22, 10, 64, 0, 0)
    # first entry (weight): data_offset, stored, nbytes, chunks, extent,
    # dtype code 11 (float32), codec 0, ndim 2, chunk axis 0, planes 1, reserved
    assert struct.unpack_from("<QQQQQBBBBB3s", index, 64) == (64, 24, 24, 1, 2, 11, 0, 2, 0, 1, bytes(3))
    # last entry (zeros): codec 1 (zstd), 4 byte planes
    assert struct.unpack_from("<QQQQQBBBBB3s", index, 64 + 3 * 48) == (
        256, 92, 1024, 1, 64, 11, 1, 2, 0, 4, bytes(3)
    )
    # dtype codes of bias (int64 = 5) and emb (bfloat16 = 15)
    assert index[64 + 48 + 40] == 5 and index[64 + 2 * 48 + 40] == 15
    dims = struct.unpack_from("<7Q", index, 64 + 4 * 48)
    assert dims == (2, 3, 2, 4, 2, 64, 4)
    assert index[-32:] == b'weight\0bias\0emb\0zeros\0{"step":7}'


def test_golden_trailer_bytes(golden):
    trailer = golden[-40:]
    assert struct.unpack("<QQQ", trailer[:24]) == (384, 408, 0x894FED52C5686089)
    assert trailer[24:26] == b"\x01\x00"  # major
    assert trailer[26:28] == b"\x00\x00"  # minor
    assert trailer[28:32] == bytes(4)  # reserved
    assert trailer[32:40] == MAGIC
    assert 384 + 408 + 40 == len(golden)


# --- format 1.1: tests/data/golden_v1_1.lzy ---------------------------------------------
#
# Generated once, by ``ls.save(golden_1_1_tensors(), path, metadata=GOLDEN_1_1_METADATA)``
# when format 1.1 added dtype codes 18-22, and committed; never regenerate it
# to make a test pass. Every tensor is raw, so the bytes do not depend on
# libzstd and the writer check runs everywhere.

GOLDEN_1_1 = DATA / "golden_v1_1.lzy"
GOLDEN_1_1_SHA256 = "34e26fa55e695ee1caf28ac57eeea24abbfb87ed81a772eb7debf8ba64279333"
GOLDEN_1_1_SIZE = 1045
GOLDEN_1_1_METADATA = {"format": "1.1"}


def golden_1_1_tensors() -> dict[str, np.ndarray]:
    from lazystore._core.dtypes import FLOAT4_X2

    return {
        "fnuz_e4m3": np.array([0.5, -2.0, 240.0, np.nan], dtype=ml_dtypes.float8_e4m3fnuz),
        "fnuz_e5m2": np.array([0.5, -2.0, 57344.0, np.nan], dtype=ml_dtypes.float8_e5m2fnuz),
        "scales": np.array([0.5, 1.0, 2.0, np.nan], dtype=ml_dtypes.float8_e8m0fnu),
        # FP4 pairs: 0x21 holds 0.5 (low nibble) then 1.0; 0xf7 holds 6.0 then -6.0;
        # 0x08 holds -0.0 then 0.0; 0x5c holds -2.0 then 3.0.
        "fp4": np.array([[0x21, 0xF7], [0x08, 0x5C]], dtype=np.uint8).view(FLOAT4_X2),
        "c32": np.array([1 + 2j, -0.5 + 0.25j], dtype=np.complex64).astype(ml_dtypes.complex32),
        "w": np.array([1.0, -1.0], dtype=np.float32),  # a 1.0 dtype beside them
    }


@pytest.fixture(scope="module")
def golden_1_1() -> bytes:
    return committed(GOLDEN_1_1, GOLDEN_1_1_SIZE, GOLDEN_1_1_SHA256)


def test_writer_reproduces_golden_1_1_bytes(golden_1_1, tmp_path):
    path = tmp_path / "again.lzy"
    ls.save(golden_1_1_tensors(), path, metadata=GOLDEN_1_1_METADATA)
    assert path.read_bytes() == golden_1_1


def test_golden_1_1_reads_back_exactly(golden_1_1):
    expected = golden_1_1_tensors()
    with ls.open(GOLDEN_1_1) as ck:
        assert ck.format_version == (1, 1)
        assert list(ck) == list(expected) and ck.metadata == GOLDEN_1_1_METADATA
        assert ck.verify() == []
        for name, want in expected.items():
            got = ck[name]
            assert (got.dtype, got.shape, got.tobytes()) == (want.dtype, want.shape, want.tobytes()), name
        assert ck.get_slice("fp4")[1].tobytes() == b"\x08\x5c"


def test_golden_1_1_values():
    # What the bytes mean (docs/format.md §8), checked against ml_dtypes' own decoding.
    got = ls.load(GOLDEN_1_1)
    for name in ("fnuz_e4m3", "fnuz_e5m2", "scales"):
        assert got[name].astype(np.float64)[:3].tolist() == golden_1_1_tensors()[name].astype(np.float64)[:3].tolist()
        assert np.isnan(got[name].astype(np.float64)[3])
    fp4 = got["fp4"].view(np.uint8)
    values = np.stack([fp4 & 0xF, fp4 >> 4], axis=-1).reshape(2, 4)  # first value in the low nibble
    assert values.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float64).tolist() == [
        [0.5, 1.0, 6.0, -6.0], [-0.0, 0.0, -2.0, 3.0]]
    assert got["c32"].astype(np.complex64).tolist() == [1 + 2j, -0.5 + 0.25j]


def test_golden_1_1_version_and_code_bytes(golden_1_1):
    assert golden_1_1[8:12] == b"\x01\x00\x01\x00"  # preamble: major 1, minor 1
    assert golden_1_1[-16:-12] == b"\x01\x00\x01\x00"  # trailer: the same
    (index_offset,) = struct.unpack_from("<Q", golden_1_1, len(golden_1_1) - 40)
    codes = [golden_1_1[index_offset + 64 + i * 48 + 40] for i in range(6)]
    assert codes == [18, 19, 20, 21, 22, 11]
    # the data, each tensor at its 64-aligned offset
    assert golden_1_1[64:68] == bytes.fromhex("38c87f80")  # e4m3fnuz: 0.5, -2, 240, NaN (0x80)
    assert golden_1_1[128:132] == bytes.fromhex("3cc47f80")  # e5m2fnuz: 0.5, -2, 57344, NaN (0x80)
    assert golden_1_1[192:196] == bytes.fromhex("7e7f80ff")  # e8m0: 2^-1, 2^0, 2^1, NaN (0xff)
    assert golden_1_1[256:260] == bytes.fromhex("21f7085c")  # fp4 pairs
    assert golden_1_1[320:328] == bytes.fromhex("003c004000b80034")  # complex32: (1, 2), (-0.5, 0.25)


# --- which version a writer writes (docs/format.md §14) --------------------------------


def _versions(path) -> tuple[bytes, bytes]:
    data = path.read_bytes()
    return data[8:12], data[-16:-12]


V10, V11 = b"\x01\x00\x00\x00", b"\x01\x00\x01\x00"


def test_files_without_1_1_dtypes_stay_1_0(tmp_path):
    arrays = {d.name: np.zeros(3, d.dtype) for d in ls.DTYPES if d.since == 0}
    ls.save(arrays, tmp_path / "a.lzy", compression="zstd")
    assert _versions(tmp_path / "a.lzy") == (V10, V10)
    with ls.open(tmp_path / "a.lzy") as ck:
        assert ck.format_version == (1, 0)


@pytest.mark.parametrize("spec", [d for d in ls.DTYPES if d.since == 1], ids=lambda d: d.name)
@pytest.mark.parametrize("where", ["alone", "after a 1.0 tensor", "compressed, last"])
def test_a_1_1_dtype_makes_the_file_1_1(tmp_path, spec, where):
    new = np.arange(16, dtype=np.uint8).view(spec.dtype)
    arrays = {"new": new} if where == "alone" else {"old": np.ones(64, np.float32), "new": new}
    path = tmp_path / "n.lzy"
    ls.save(arrays, path, compression="zstd" if where.startswith("compressed") else None)
    # The preamble was written before "new" was known, and rewritten: both agree (rule P4).
    assert _versions(path) == (V11, V11)
    with ls.open(path) as ck:
        assert ck.format_version == (1, 1) and ck.verify() == []
        assert ck["new"].tobytes() == new.tobytes()


def test_each_shard_states_its_own_version(tmp_path):
    arrays = {"old": np.ones(256, np.float32), "new": np.zeros(256, ml_dtypes.float8_e8m0fnu)}
    ls.save(arrays, tmp_path / "folder", max_shard_size=512)
    versions = sorted(_versions(p)[0] for p in (tmp_path / "folder").glob("*.lzy"))
    assert versions == [V10, V11]
    assert ls.load(tmp_path / "folder")["new"].tobytes() == arrays["new"].tobytes()


def test_a_destination_that_cannot_rewrite_its_start_gets_1_1(tmp_path):
    # An upload sends the preamble before the last tensor is known, so it
    # states the newest minor; every 1.x reader still reads such a file.
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://golden-versions/{tmp_path.name}.lzy"
    ls.save({"old": np.ones(4, np.float32)}, url)
    data = fsspec.filesystem("memory").cat_file(url)
    assert (data[8:12], data[-16:-12]) == (V11, V11)
    assert ls.load(url)["old"].tolist() == [1.0] * 4
