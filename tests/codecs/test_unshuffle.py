"""Un-shuffling planes back into elements, by the C kernel, numpy and a
hand-made Blosc chunk, and the zstd codec built on it: the same bytes every
way, from any thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

from lazystore.codecs import compiled, unshuffle
from lazystore.codecs.unshuffle import unshuffle_into
from lazystore.codecs.zstd import ZstdPlanes
from lazystore.errors import FormatError


def shuffled(elements: np.ndarray) -> list[bytes]:
    """Plane j: byte j of every element (what the writer stores)."""
    grouped = elements.reshape(-1).view(np.uint8).reshape(elements.size, elements.itemsize)
    return [grouped[:, j].tobytes() for j in range(elements.itemsize)]


def random_elements(rng, n: int, itemsize: int) -> np.ndarray:
    return rng.integers(0, 256, (n, itemsize), dtype=np.uint8)


@pytest.fixture(params=["compiled", "numpy", "blosc"])
def path(request, monkeypatch):
    """Each test runs through every way of un-shuffling: the C kernel, and
    without it numpy's copy (small outputs) and the Blosc frame (the rest)."""
    if request.param == "compiled":
        if compiled.kernels is None:
            pytest.skip("the C kernels are not built here")
    else:
        monkeypatch.setattr(compiled, "kernels", None)
        monkeypatch.setattr(unshuffle, "NUMPY_BYTES", 1 << 40 if request.param == "numpy" else 0)
    return request.param


@pytest.mark.parametrize("planes", [2, 3, 4, 8, 16, 255])
@pytest.mark.parametrize("n", [1, 7, 127, 128, 4099])
def test_matches_numpy(planes, n, path):
    elements = random_elements(np.random.default_rng(planes * n), n, planes)
    out = np.full(n * planes, 0xAA, dtype=np.uint8)
    unshuffle_into([elements[:, j].tobytes() for j in range(planes)], out)
    np.testing.assert_array_equal(out, elements.reshape(-1))


@pytest.mark.parametrize("window", [1, 3, 64, 1000])
def test_many_windows(monkeypatch, window):
    # A chunk larger than one window is un-shuffled a window of elements at a time (by Blosc).
    monkeypatch.setattr(compiled, "kernels", None)
    monkeypatch.setattr(unshuffle, "NUMPY_BYTES", 0)
    monkeypatch.setattr(unshuffle, "WINDOW_BYTES", window)
    elements = random_elements(np.random.default_rng(window), 999, 4)
    out = np.empty(elements.size, dtype=np.uint8)
    unshuffle_into([elements[:, j].copy() for j in range(4)], out)  # numpy planes too
    np.testing.assert_array_equal(out, elements.reshape(-1))


def test_writes_only_its_output(path):
    elements = random_elements(np.random.default_rng(1), 100, 4)
    big = np.zeros(1000, dtype=np.uint8)
    unshuffle_into([memoryview(elements[:, j].tobytes()) for j in range(4)], big[300:700])
    np.testing.assert_array_equal(big[300:700], elements.reshape(-1))
    assert not big[:300].any() and not big[700:].any()


@pytest.mark.parametrize(("planes", "out_len"), [([b"ab", b"abc"], 5), ([b"ab", b"ab"], 5), ([b"a"], 1)])
def test_rejects_bad_shapes(planes, out_len, path):
    with pytest.raises(ValueError):
        unshuffle_into(planes, np.empty(out_len, dtype=np.uint8))


CASES = {
    "float32": lambda rng: (rng.standard_normal(70_000) * 0.02).astype(np.float32),
    "bfloat16": lambda rng: (rng.standard_normal(70_000) * 0.02).astype(ml_dtypes.bfloat16),
    "int64": lambda rng: rng.integers(-5, 5, 30_000).astype(np.int64),
    "complex128": lambda rng: rng.standard_normal(9_000) + 1j,
    "uint8": lambda rng: rng.integers(0, 4, 50_000).astype(np.uint8),
}


@pytest.mark.parametrize("dtype", list(CASES))
def test_codec_round_trip(dtype, path):
    data = CASES[dtype](np.random.default_rng(7))
    chunk = data.view(np.uint8).reshape(-1)
    codec = ZstdPlanes()
    planes = codec.planes_for(data.itemsize)
    stored = codec.encode(chunk, planes, data.dtype.kind in "fc" or dtype == "bfloat16")
    out = np.empty_like(chunk)
    codec.decode_into(stored, out, planes)
    np.testing.assert_array_equal(out, chunk)


def test_codec_from_many_threads(path):
    # Each thread has its own frame buffer: concurrent decodes must not mix.
    rng = np.random.default_rng(3)
    codec = ZstdPlanes()
    chunks = [(rng.standard_normal(20_000 + 4 * i) * 0.02).astype(np.float32).view(np.uint8) for i in range(32)]
    stored = [codec.encode(c, 4, True) for c in chunks]

    def decode(k: int) -> np.ndarray:
        out = np.empty_like(chunks[k])
        codec.decode_into(stored[k], out, 4)
        return out

    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            for k, out in enumerate(pool.map(decode, range(len(chunks)))):
                np.testing.assert_array_equal(out, chunks[k])


def test_codec_rejects_output_not_in_planes():
    codec = ZstdPlanes()
    stored = codec.encode(np.arange(16, dtype=np.uint8), 4, False)
    with pytest.raises(FormatError, match="do not split"):
        codec.decode_into(stored, np.empty(18, dtype=np.uint8), 4)
