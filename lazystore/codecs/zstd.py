"""zstd over byte planes.

Float bytes of the same significance compress together far better than
interleaved ones (trained fp32 weights: 1.09x plain, 1.21x by plane), so a
chunk of n elements of ``itemsize`` bytes is split into ``itemsize`` planes,
plane j holding byte j (little-endian) of every element. Each plane is one
zstd frame, or is stored raw when zstd cannot shrink it (mantissa planes
mostly), which also makes decoding them a plain copy.

Stored chunk: ``planes`` little-endian u32 plane lengths, then the planes.
A plane whose stored length equals its decoded length is raw.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import zstandard

from ..errors import FormatError
from ..format import need
from .base import Codec

_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    # zstandard contexts are not thread-safe: one per thread, reused.
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def _compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level)
    return c


@dataclass(frozen=True)
class ZstdPlanes(Codec):
    level: int = 1  # on byte planes level 1 beats 3 on speed and nearly ties on size

    id = 1
    name = "zstd"

    def planes_for(self, itemsize: int) -> int:
        return itemsize

    def encode(self, chunk: np.ndarray, planes: int):
        grouped = chunk.reshape(-1, planes).T if planes > 1 else chunk.reshape(1, -1)
        cctx = _compressor(self.level)
        stored = []
        for plane in grouped:
            plane = np.ascontiguousarray(plane)
            packed = cctx.compress(plane)
            stored.append(packed if len(packed) < plane.nbytes else plane)
        header = np.array([len(memoryview(s).cast("B")) for s in stored], dtype="<u4")
        return b"".join([header.tobytes(), *stored])

    def decode_into(self, stored, out: np.ndarray, planes: int) -> None:
        stored = memoryview(stored)
        need(stored, 4 * planes, "chunk plane header")
        lengths = np.frombuffer(stored[: 4 * planes], dtype="<u4").tolist()
        if 4 * planes + sum(lengths) != len(stored):
            raise FormatError("corrupt chunk: plane lengths do not add up to the chunk")
        plane_len = len(out) // planes
        grouped = out.reshape(-1, planes) if planes > 1 else out.reshape(-1, 1)
        pos = 4 * planes
        for j, length in enumerate(lengths):
            grouped[:, j] = _decode_plane(stored[pos : pos + length], plane_len)
            pos += length


def _decode_plane(blob: memoryview, plane_len: int) -> np.ndarray:
    if len(blob) == plane_len:
        return np.frombuffer(blob, dtype=np.uint8)
    if len(blob) > plane_len:
        raise FormatError("corrupt chunk: plane is longer than its decoded size")
    try:
        # A frame declaring its size makes zstandard allocate that much, so
        # the declaration is checked before anything is decompressed.
        declared = zstandard.frame_content_size(blob)
        if declared not in (plane_len, -1):
            raise FormatError(f"corrupt chunk: plane declares {declared} bytes, expected {plane_len}")
        data = _decompressor().decompress(blob, max_output_size=plane_len)
    except zstandard.ZstdError as exc:
        raise FormatError(f"corrupt chunk: {exc}") from None
    if len(data) != plane_len:
        raise FormatError(f"corrupt chunk: plane decoded to {len(data)} bytes, expected {plane_len}")
    return np.frombuffer(data, dtype=np.uint8)
