"""The optional C kernels (lazystore/codecs/_kernels.c) against numpy, and
delta files read with and without them: the same bytes either way."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore.codecs import compiled
from lazystore.codecs.delta import DeltaPlanes, add_zigzag_into, zigzag_difference

kernels = compiled.kernels
needs_kernels = pytest.mark.skipif(kernels is None, reason="the C kernels are not built here")
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


def planes_of(elements: np.ndarray) -> list[bytes]:
    """Plane j: byte j of every row of ``elements`` (n x p bytes)."""
    return [elements[:, j].tobytes() for j in range(elements.shape[1])]


@needs_kernels
@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 16, 255])
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 1000])
def test_unshuffle_matches_numpy(p, n):
    elements = np.random.default_rng(p * 1000 + n).integers(0, 256, (n, p), dtype=np.uint8)
    out = np.full(n * p, 0xAA, dtype=np.uint8)
    kernels.unshuffle(planes_of(elements), out)
    np.testing.assert_array_equal(out, elements.reshape(-1))


@needs_kernels
@pytest.mark.parametrize("word", [2, 4, 8])
@pytest.mark.parametrize("offset", [0, 1, 3])  # the output need not be aligned to a word
def test_add_unzigzag_undoes_zigzag_difference(word, offset):
    rng = np.random.default_rng(word + offset)
    n = 1001
    base = rng.integers(0, 256, n * word, dtype=np.uint8)
    # Small steps both ways, large ones, and the extremes (differences that wrap around).
    steps = np.concatenate([rng.integers(-300, 300, n - 4), [0, -1, 2 ** (8 * word - 1) - 1, -(2 ** (8 * word - 1))]])
    new = (base.view(UINT[word]) + steps.astype(np.int64).astype(UINT[word])).view(np.uint8)
    zigzag = zigzag_difference(new, base, word).reshape(n, word)
    buffer = np.zeros(n * word + offset, dtype=np.uint8)
    out = buffer[offset:]
    out[:] = base
    kernels.add_unzigzag(planes_of(zigzag), out)
    np.testing.assert_array_equal(out, new)
    assert not buffer[:offset].any()


@needs_kernels
@pytest.mark.parametrize("word", [2, 4, 8])
def test_add_unzigzag_matches_numpy(word):
    rng = np.random.default_rng(word)
    base = rng.integers(0, 256, 4096 * word, dtype=np.uint8)
    zigzag = rng.integers(0, 256, (4096, word), dtype=np.uint8)  # any words at all
    ours, numpys = base.copy(), base.copy()
    kernels.add_unzigzag(planes_of(zigzag), ours)
    add_zigzag_into(numpys, zigzag.reshape(-1).copy(), word)
    np.testing.assert_array_equal(ours, numpys)


@needs_kernels
@pytest.mark.parametrize(
    ("planes", "out_len", "message"),
    [
        ([b"ab", b"abc"], 5, "differ in length"),
        ([b"ab", b"ab"], 5, "into 5 bytes"),
        ([], 0, "0 planes"),
        ([b"a"] * 256, 256, "256 planes"),
    ],
)
def test_unshuffle_refuses_bad_shapes(planes, out_len, message):
    with pytest.raises(ValueError, match=message):
        kernels.unshuffle(planes, np.empty(out_len, dtype=np.uint8))


@needs_kernels
def test_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="3-byte words"):
        kernels.add_unzigzag([b"a", b"b", b"c"], np.empty(3, dtype=np.uint8))
    with pytest.raises(BufferError):
        kernels.unshuffle([b"ab", b"cd"], b"read-only")
    with pytest.raises(TypeError):
        kernels.unshuffle([b"ab", 7], np.empty(4, dtype=np.uint8))
    with pytest.raises(TypeError):
        kernels.unshuffle(5, np.empty(4, dtype=np.uint8))
    with pytest.raises(ValueError, match="contiguous"):  # a strided output is not one buffer
        kernels.unshuffle([b"ab", b"cd"], np.empty(8, dtype=np.uint8)[::2])


@needs_kernels
def test_threads_run_at_once():
    # The kernels let go of the GIL: results from a pool match, chunk by chunk.
    rng = np.random.default_rng(5)
    chunks = [rng.integers(0, 256, (50_000, 4), dtype=np.uint8) for _ in range(16)]

    def run(k: int) -> np.ndarray:
        out = np.empty(chunks[k].size, dtype=np.uint8)
        kernels.unshuffle(planes_of(chunks[k]), out)
        return out

    with ThreadPoolExecutor(4) as pool:
        for k, out in enumerate(pool.map(run, range(len(chunks)))):
            np.testing.assert_array_equal(out, chunks[k].reshape(-1))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "complex64", "int8", "float16"])
def test_delta_chunks_decode_alike_with_and_without_kernels(monkeypatch, dtype):
    # complex64 (words half an element) and int8 (one-byte words) take numpy's way even with the kernels.
    rng = np.random.default_rng(11)
    base = rng.standard_normal(5000).astype(np.float32)
    new = base + rng.standard_normal(5000).astype(np.float32) * 1e-4
    if dtype == "complex64":
        base, new = base[:2500] + 1j * base[2500:], new[:2500] + 1j * new[2500:]
    if dtype == "int8":
        base, new = base * 100, new * 100
    target = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    base, new = base.astype(target), new.astype(target)
    chunk, base_bytes = new.view(np.uint8).reshape(-1), base.view(np.uint8).reshape(-1)
    itemsize = new.dtype.itemsize
    word = itemsize // 2 if dtype == "complex64" else itemsize
    codec = DeltaPlanes()
    stored = codec.encode_delta(chunk, base_bytes, itemsize, word, True)
    decoded = []
    for kernels_on in (True, False):
        if not kernels_on:
            monkeypatch.setattr(compiled, "kernels", None)
        out = base_bytes.copy()
        codec.add_into(stored, out, itemsize, word)
        decoded.append(out)
    np.testing.assert_array_equal(decoded[0], chunk)
    np.testing.assert_array_equal(decoded[1], chunk)


def test_a_delta_file_reads_alike_with_and_without_kernels(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    first = {"w": rng.standard_normal((512, 300)).astype(np.float32), "b": rng.standard_normal(7).astype(np.float32)}
    second = {k: v + rng.standard_normal(v.shape).astype(np.float32) * 1e-4 for k, v in first.items()}
    ls.save(first, tmp_path / "a.lzy", compression="zstd")
    ls.save(second, tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy")
    with_kernels = ls.load(tmp_path / "b.lzy")
    monkeypatch.setattr(compiled, "kernels", None)
    without = ls.load(tmp_path / "b.lzy")
    for k, v in second.items():
        np.testing.assert_array_equal(with_kernels[k], v)
        np.testing.assert_array_equal(without[k], v)
