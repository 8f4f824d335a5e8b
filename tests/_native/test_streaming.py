"""Tensors larger than memory: the writer takes a tensor in pieces (or from a
memmap) and holds one window of it; slices decode into a buffer the size of
the slice; copying streams block by block. Memory is measured with
tracemalloc, which sees every numpy allocation."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pytest

import lazystore as ls
from lazystore.interop import convert
from lazystore.views import chunk_reader
from lazystore.writing import writer as writer_module


def floats(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 0.02).astype(np.float32)


@pytest.fixture
def small_windows(monkeypatch):
    """Windows and blocks of 64 KiB, so small tensors stream as large ones do."""
    monkeypatch.setattr(writer_module, "WINDOW_BYTES", 64 << 10)
    monkeypatch.setattr(convert, "COPY_BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(chunk_reader, "PART_BATCH_BYTES", 64 << 10)


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("piece", [1, 997, 4096, 1 << 20])
def test_pieces_write_the_same_file_as_one_array(tmp_path, small_windows, compression, piece):
    arr = floats((300, 257))
    one, many = tmp_path / "one.lzy", tmp_path / "many.lzy"
    with ls.Writer(one, compression=compression, chunk_bytes=4096) as w:
        w.add("w", arr)
    flat = arr.reshape(-1).view(np.uint8)
    with ls.Writer(many, compression=compression, chunk_bytes=4096) as w:
        w.add_pieces("w", (flat[i : i + piece] for i in range(0, len(flat), piece)),
                     dtype=arr.dtype, shape=arr.shape)
    assert one.read_bytes() == many.read_bytes()
    with ls.open(many) as ck:
        assert ck.verify() == [] and np.array_equal(ck["w"], arr)
        assert ck.info("w").compression == compression


def test_pieces_may_be_arrays_of_another_dtype_or_bytes(tmp_path):
    arr = np.arange(1000, dtype=np.int64).reshape(10, 100)
    rows = [arr[:3], arr[3:7].tobytes(), bytearray(arr[7:].tobytes())]
    with ls.Writer(tmp_path / "a.lzy") as w:
        w.add_pieces("a", rows, dtype="int64", shape=(10, 100))
    with ls.open(tmp_path / "a.lzy") as ck:
        assert np.array_equal(ck["a"], arr)


@pytest.mark.parametrize("extra", [-1, 1])
def test_pieces_of_the_wrong_size_abort_the_save(tmp_path, extra):
    path = tmp_path / "a.lzy"
    ls.save({"old": np.ones(3)}, path)
    data = np.zeros(100 * 4 + extra, np.uint8)
    with pytest.raises(ls.InvalidInputError, match="dtype x shape needs 400"):
        with ls.Writer(path) as w:
            w.add("first", np.ones(5))
            w.add_pieces("a", [data[:50], data[50:]], dtype=np.float32, shape=(100,))
    assert os.listdir(tmp_path) == ["a.lzy"]
    with ls.open(path) as ck:
        assert list(ck) == ["old"]


def test_add_pieces_refuses_bad_shapes_and_dtypes(tmp_path):
    with ls.Writer(tmp_path / "a.lzy") as w:
        with pytest.raises(ls.InvalidInputError):
            w.add_pieces("a", [], dtype=np.float32, shape=(-1,))
        with pytest.raises(ls.InvalidInputError):
            w.add_pieces("a", [], dtype=np.float32, shape=(2.5,))
        with pytest.raises(ls.UnsupportedDtypeError):
            w.add_pieces("a", [], dtype=object, shape=(1,))
        w.add_pieces("empty", [], dtype=np.float32, shape=(0, 3))
    with ls.open(tmp_path / "a.lzy") as ck:
        assert ck["empty"].shape == (0, 3) and list(ck) == ["empty"]


def test_a_memmap_streams_in(tmp_path, small_windows):
    arr = floats((512, 300))
    raw = tmp_path / "w.bin"
    arr.tofile(raw)
    mm = np.memmap(raw, dtype=np.float32, mode="r", shape=arr.shape)
    ls.save({"w": mm}, tmp_path / "w.lzy", compression="zstd")
    with ls.open(tmp_path / "w.lzy") as ck:
        assert np.array_equal(ck["w"], arr) and ck.info("w").compression == "zstd"


def test_the_raw_or_compressed_choice_is_made_on_the_first_window(tmp_path, small_windows):
    # Random bytes first: zstd cannot shrink them, so the tensor stays raw
    # even though the rest would compress (it is larger than one window).
    rng = np.random.default_rng(1)
    arr = np.concatenate([rng.integers(0, 256, 200_000, dtype=np.uint8), np.zeros(200_000, np.uint8)])
    ls.save({"a": arr}, tmp_path / "a.lzy", compression="zstd", chunk_bytes=4096)
    with ls.open(tmp_path / "a.lzy") as ck:
        assert ck.info("a").compression is None and np.array_equal(ck["a"], arr)


def peak_numpy_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# Reading decodes whole chunks (1 MiB by default): a slice or a copy holds
# a few chunks beside its result, never the 64 MiB tensor.
BOUND = 8 << 20


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_slice_costs_the_slice_not_the_tensor(tmp_path, small_windows, compression):
    arr = floats((16384, 1024))  # 64 MiB
    ls.save({"w": arr}, tmp_path / "w.lzy", compression=compression)
    with ls.open(tmp_path / "w.lzy", mmap=False) as ck:
        part = ck.get_slice("w")
        got = {}
        peak = peak_numpy_bytes(lambda: got.update(rows=part[100:110], cols=part[5:3000:7, 10:12]))
        assert np.array_equal(got["rows"], arr[100:110]) and np.array_equal(got["cols"], arr[5:3000:7, 10:12])
    assert peak < BOUND, f"slicing 64 MiB peaked at {peak / 2**20:.1f} MiB"


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_copying_a_tensor_holds_a_window_not_the_tensor(tmp_path, small_windows, compression):
    arr = floats((16384, 1024))  # 64 MiB, copied 64 KiB at a time
    src = tmp_path / "src.lzy"
    ls.save({"w": arr, "b": np.ones(3)}, src, compression=compression)
    peak = peak_numpy_bytes(lambda: convert.to_lazystore(src, tmp_path / "dst.lzy", compression="zstd"))
    assert peak < BOUND, f"copying 64 MiB peaked at {peak / 2**20:.1f} MiB"
    with ls.open(tmp_path / "dst.lzy") as ck:
        assert np.array_equal(ck["w"], arr) and ck.verify() == []
    peak = peak_numpy_bytes(lambda: convert.to_safetensors(src, tmp_path / "dst.safetensors"))
    assert peak < BOUND, f"copying 64 MiB to safetensors peaked at {peak / 2**20:.1f} MiB"
    with ls.open(tmp_path / "dst.safetensors") as ck:
        assert np.array_equal(ck["w"], arr)
