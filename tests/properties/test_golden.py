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


@pytest.fixture(scope="module")
def golden() -> bytes:
    data = GOLDEN.read_bytes()
    # The committed file itself: if this fails, the file was changed, not the code.
    assert len(data) == GOLDEN_SIZE
    assert hashlib.sha256(data).hexdigest() == GOLDEN_SHA256
    return data


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
