"""Byte un-shuffle: planes back into interleaved elements, at SIMD speed.

Where the optional C kernels are built (lazystore/codecs/_kernels.c), they
interleave the planes straight into the output in one pass. Without them,
Blosc does it, as follows.

numpy's ``out.reshape(-1, p)[:, j] = plane`` moves one byte per step and
was half of decoding a compressed checkpoint. Blosc's un-shuffle is
SSE2/AVX2, several times faster, but Blosc exposes it only inside
decompression. So the planes are handed to it as a
Blosc 1 chunk that Blosc only has to copy and un-shuffle: one block, not
split into streams, its one stream stored raw (compressed size equal to the
block size, which Blosc copies as is), the shuffle flag set. Blosc parses
nothing but the 24-byte header written here; the planes' bytes are only
copied. numcodecs bundles Blosc 1 and ships wheels everywhere, so this costs
no build step. The alternatives measured (numpy, numcodecs.Shuffle, a
scalar loop; bitshuffle, bit-level only; blosc2, the same trick but slow to
import) are in docs/benchmarks.md, "Figures behind the code".
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
from numcodecs import blosc

from lazystore._core.scratch import scratch
from lazystore.codecs import compiled

# Below this many bytes numpy's strided copy wins: a Blosc call has a fixed
# cost (building the frame, Blosc's context) that numpy's copy does not
# (the crossover measured: docs/benchmarks.md, "Figures behind the code"). Small tensors (biases,
# norms) are most tensors of a model.
NUMPY_BYTES = 64 << 10
# Elements un-shuffled per Blosc call: bounds the per-thread frame buffer
# (and Blosc's own temporary block) whatever the chunk size; a default
# 1 MiB chunk is one call.
WINDOW_BYTES = 1 << 20

# Blosc 1 chunk header (16 bytes), then the block-start table (one i32) and
# the block's one stream length (i32): see c-blosc's README_HEADER.rst.
_HEADER = struct.Struct("<BBBBiiiii")
_HEADER_BYTES = _HEADER.size  # 24
_VERSION, _VERSION_LZ = 2, 1
# bit 0: byte-shuffled; bit 4: block not split into streams; bits 5-7:
# codec (0, BloscLZ, never invoked: a raw stream is copied, not decoded).
_FLAGS = 0x01 | 0x10

def unshuffle_into(planes: Sequence, out: np.ndarray) -> None:
    """Interleave ``planes`` (equal-length byte buffers, plane j holding byte j
    of every element) into ``out`` (1-D uint8, their total size)."""
    p = len(planes)
    n = len(out) // p
    if not 1 < p <= 255 or n * p != len(out):  # the header's typesize is one byte
        raise ValueError(f"cannot un-shuffle {len(out)} bytes into {p} planes")
    views = [np.frombuffer(plane, dtype=np.uint8) for plane in planes]
    if any(len(v) != n for v in views):
        raise ValueError("planes differ in length")
    if compiled.kernels is not None:  # one pass, where Blosc's takes three
        compiled.kernels.unshuffle(views, out)
        return
    if len(out) < NUMPY_BYTES:
        grouped = out.reshape(n, p)
        for j, v in enumerate(views):
            grouped[:, j] = v
        return
    step = max(1, WINDOW_BYTES // p)
    for lo in range(0, n, step):
        k = min(step, n - lo)
        nbytes = k * p
        frame = scratch("unshuffle frame", _HEADER_BYTES + nbytes)
        # The ignore: numpy's stubs give ndarray the buffer protocol only on Python >= 3.12.
        _HEADER.pack_into(frame, 0, _VERSION, _VERSION_LZ, _FLAGS, p, nbytes, nbytes,  # type: ignore[arg-type]
                          _HEADER_BYTES + nbytes, _HEADER_BYTES - 4, nbytes)
        body = frame[_HEADER_BYTES:].reshape(p, k)
        for j, v in enumerate(views):
            body[j] = v[lo : lo + k]
        blosc.decompress(frame, out[lo * p : lo * p + nbytes])
