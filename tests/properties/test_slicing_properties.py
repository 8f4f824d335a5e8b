"""Property tests: get_slice(name)[idx] is exactly arr[idx]; compressed slices
decode only the chunks they touch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore._native.locate import read_index
from lazystore.sources import LocalFile
from lazystore.testing.strategies import arrays, basic_indices, dtypes, random_array, shapes
from tests.hypothesis_profiles import examples

# Biased towards small chunks so that most tensors have many of them.
CHUNK_BYTES = st.one_of(st.integers(16, 128), st.integers(16, 4096))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("slicing")


def assert_same_result(got, expected, what=""):
    """Bit-for-bit equality, shape, dtype, and scalar-vs-array like numpy."""
    assert isinstance(got, np.ndarray) == isinstance(expected, np.ndarray), (what, type(got), type(expected))
    g, e = np.asarray(got), np.asarray(expected)
    assert g.shape == e.shape, what
    assert g.dtype == e.dtype, what
    assert g.tobytes() == e.tobytes(), what


# ---------------------------------------------------------------------------
# the strategies themselves
# ---------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=examples(200), **SETTINGS)
@given(data=st.data())
def test_strategies_produce_valid_values(data):
    dtype = data.draw(dtypes())
    assert dtype in [d.dtype for d in ls.DTYPES]
    shape = data.draw(shapes())
    assert len(shape) <= 4 and all(0 <= d <= 6 for d in shape)
    arr = data.draw(arrays(dtype=dtype, shape=shape))
    assert arr.dtype == dtype and arr.shape == shape
    if dtype == np.bool_:
        assert set(arr.view(np.uint8).ravel().tolist()) <= {0, 1}
    idx = data.draw(basic_indices(shape))
    arr[idx]  # valid for numpy


# ---------------------------------------------------------------------------
# get_slice == numpy indexing
# ---------------------------------------------------------------------------


@pytest.mark.slow
@settings(max_examples=examples(300), **SETTINGS)
@given(
    data=st.data(),
    arr=arrays(max_side=12, max_elements=3000),
    compression=st.sampled_from([None, "zstd"]),
)
def test_get_slice_matches_numpy(folder, data, arr, compression):
    # Tiny chunks rarely compress (each holds a plane header), so zstd gets
    # chunks big enough for low-entropy data to be stored compressed.
    chunk_bytes = data.draw(CHUNK_BYTES if compression is None else st.integers(256, 4096), label="chunk_bytes")
    path = folder / "prop.lzy"
    ls.save({"t": arr, "other": np.arange(3)}, path, compression=compression, chunk_bytes=chunk_bytes)
    with ls.open(path) as ck:
        info = ck.info("t")
        note(f"info={info}")
        event(f"compression={info.compression}, many chunks={info.chunk_count > 1}")
        assert info.shape == arr.shape and info.dtype == arr.dtype
        sl = ck.get_slice("t")
        assert sl.shape == arr.shape and sl.dtype == arr.dtype
        for _ in range(4):
            idx = data.draw(basic_indices(arr.shape), label="index")
            assert_same_result(sl[idx], arr[idx], repr(idx))
        assert_same_result(ck["t"], arr)


COMPRESSED_CASES = {
    # name: (array, chunk_bytes) -- low-entropy data that certainly compresses
    "f32": (random_array(np.float32, (40, 50), 1, "pool", 0.1), 512),
    "bf16_4d": (random_array(ls.DTYPES[14].dtype, (5, 6, 7, 8), 2, "pool", 0.1), 512),
    "c128": (random_array(np.complex128, (9, 4, 30), 3, "pool", 0.1), 2048),
    "u8": (random_array(np.uint8, (17, 3, 60), 4, "pool"), 256),
    "i16_chunked_mid_axis": (random_array(np.int16, (3, 50, 40), 5, "pool"), 400),
}


@pytest.fixture(scope="module")
def compressed_files(folder):
    """One file per case; every tensor is compressed and has many chunks."""
    paths = {}
    for name, (arr, chunk_bytes) in COMPRESSED_CASES.items():
        path = folder / f"compressed-{name}.lzy"
        ls.save({name: arr}, path, compression="zstd", chunk_bytes=chunk_bytes)
        with ls.open(path) as ck:
            assert ck.info(name).compression == "zstd", name
            assert ck.info(name).chunk_count > 4, name
        paths[name] = path
    return paths


@pytest.mark.slow
@settings(max_examples=examples(300), **SETTINGS)
@given(data=st.data(), name=st.sampled_from(sorted(COMPRESSED_CASES)))
def test_get_slice_of_compressed_chunks_matches_numpy(compressed_files, data, name):
    arr = COMPRESSED_CASES[name][0]
    idx = data.draw(basic_indices(arr.shape), label="index")
    with ls.open(compressed_files[name]) as ck:
        assert_same_result(ck.get_slice(name)[idx], arr[idx], repr(idx))


@pytest.mark.slow
@settings(max_examples=examples(150), **SETTINGS)
@given(
    data=st.data(),
    arr=arrays(max_side=12, max_elements=3000),
    chunk_bytes=CHUNK_BYTES,
)
def test_get_slice_with_verify_on_access(folder, data, arr, chunk_bytes):
    path = folder / "verify.lzy"
    ls.save({"t": arr}, path, chunk_bytes=chunk_bytes)
    with ls.open(path, verify=True) as ck:
        for _ in range(3):
            idx = data.draw(basic_indices(arr.shape), label="index")
            assert_same_result(ck.get_slice("t")[idx], arr[idx], repr(idx))


# ---------------------------------------------------------------------------
# only the touched chunks are decoded
# ---------------------------------------------------------------------------


def _chunk_regions(path, name):
    """(file offset, stored length) of every chunk of a tensor, from the index."""
    source = LocalFile(path)
    try:
        index, _ = read_index(source)
        entry = index.entry(index.keys[name])
        return list(zip(entry.chunk_offsets(), entry.stored))
    finally:
        source.close()


def _corrupt_chunks_except(path, name, keep):
    regions = _chunk_regions(path, name)
    blob = bytearray(path.read_bytes())
    for c, (off, n) in enumerate(regions):
        if c not in keep:
            blob[off + n // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    return regions


@pytest.mark.parametrize("compression", ["zstd", None])
def test_get_slice_reads_only_touched_chunks(tmp_path, compression):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 16, size=(1000, 256)).astype(np.float32)  # compressible
    path = tmp_path / "ck.lzy"
    ls.save({"w": arr, "after": np.arange(10)}, path, compression=compression, chunk_bytes=4096)
    with ls.open(path) as ck:
        info = ck.info("w")
        assert info.compression == compression
        assert info.chunk_count == 250  # 4 rows of 1 KiB per chunk
    regions = _chunk_regions(path, "w")
    assert len(regions) == 250
    assert regions[0][0] == info.offset
    assert sum(n for _, n in regions) == info.stored_nbytes

    _corrupt_chunks_except(path, "w", keep={0, 100})

    # Compressed chunks are always checked on decode; raw ones with verify=True.
    with ls.open(path, verify=True) as ck:
        assert ck.verify() == ["w"]
        sl = ck.get_slice("w")
        assert_same_result(sl[0:4], arr[0:4])
        assert_same_result(sl[3], arr[3])
        assert_same_result(sl[1:3, 10:20], arr[1:3, 10:20])
        assert_same_result(sl[2, -1], arr[2, -1])
        assert_same_result(sl[403:400:-1, ::7], arr[403:400:-1, ::7])
        assert_same_result(sl[None, 400:404, ...], arr[None, 400:404, ...])
        assert_same_result(sl[4:4], arr[4:4])  # touches nothing
        with pytest.raises(ls.ChecksumError):
            sl[0:5]  # row 4 is in chunk 1
        with pytest.raises(ls.ChecksumError):
            sl[-1]
        with pytest.raises(ls.ChecksumError):
            sl[::200]
        with pytest.raises(ls.ChecksumError):
            ck["w"]
        with pytest.raises(ls.ChecksumError):
            ck.load(["w"])
        # The other tensor is untouched.
        assert_same_result(ck["after"], np.arange(10))


def test_get_slice_later_axis_touches_every_chunk(tmp_path):
    # A slice along the last axis of a row-chunked tensor needs every chunk.
    arr = (np.arange(64 * 64, dtype=np.int32) % 5).reshape(64, 64)
    path = tmp_path / "ck.lzy"
    ls.save({"w": arr}, path, compression="zstd", chunk_bytes=256)
    with ls.open(path) as ck:
        assert ck.info("w").compression == "zstd"
        n = ck.info("w").chunk_count
        assert n == 64
    _corrupt_chunks_except(path, "w", keep={0})
    with ls.open(path) as ck:
        assert_same_result(ck.get_slice("w")[0, :], arr[0, :])
        with pytest.raises(ls.ChecksumError):
            ck.get_slice("w")[:, 0]
