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

from lazystore._core.arguments import integer
from lazystore._core.short_reads import need
from lazystore.codecs.base import Codec
from lazystore.codecs.unshuffle import unshuffle_into
from lazystore.errors import FormatError

_local = threading.local()


def _decompressor() -> zstandard.ZstdDecompressor:
    # zstandard contexts are not thread-safe: one per thread, reused.
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


# Float planes (exponents, mantissas) are noise-like symbols with a skewed
# distribution: their best code is zstd's Huffman stage alone, and LZ matches
# only get in the way. Starving the match finder (a 64-entry hash table,
# 7-byte minimum match) makes zstd code them within a few percent of their
# order-0 entropy, smaller and faster than level 1 (the figures on trained
# weights: docs/benchmarks.md, "Figures behind the code"). Repetitive data (ints, masks, text)
# still wants real matching, so it gets level 1.
FLOAT_PLANE_PARAMS = dict(
    strategy=zstandard.STRATEGY_FAST, window_log=17, chain_log=6, hash_log=6,
    search_log=1, min_match=7, target_length=0,
)
DEFAULT_LEVEL = 1
# The levels zstd has: its negative "fast" levels (ZSTD_minCLevel) to 22.
MIN_LEVEL, MAX_LEVEL = -(1 << 17), zstandard.MAX_COMPRESSION_LEVEL


def check_level(level) -> int | None:
    """A ``compression_level`` argument, checked: None (tuned per dtype) or
    one of zstd's levels. zstandard would refuse 40 itself, but only when the
    first chunk is compressed, with a bare ValueError."""
    return None if level is None else integer("compression_level", level, MIN_LEVEL, MAX_LEVEL)


def _compressor(setting) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    c = cache.get(setting)
    if c is None:
        if setting == "float-planes":
            params = zstandard.ZstdCompressionParameters(**FLOAT_PLANE_PARAMS)
            c = zstandard.ZstdCompressor(compression_params=params)
        else:
            c = zstandard.ZstdCompressor(level=setting)
        cache[setting] = c
    return c


@dataclass(frozen=True)
class ZstdPlanes(Codec):
    """Codec 1: zstd over byte planes, each plane stored raw when zstd cannot shrink it.

    Parameters
    ----------
    level : int or None, optional
        A zstd level (negative "fast" levels to 22); None tunes the setting
        per dtype (float planes get a setting of their own).

    Raises
    ------
    InvalidInputError
        ``level`` is not one of zstd's levels.
    """

    level: int | None = None  # None: tuned per dtype (see FLOAT_PLANE_PARAMS)

    id = 1
    name = "zstd"

    def __post_init__(self) -> None:
        check_level(self.level)

    def planes_for(self, itemsize: int) -> int:
        return itemsize

    def encode(self, chunk: np.ndarray, planes: int, is_float: bool, *, dtype: np.dtype | None = None) -> bytes:
        grouped = chunk.reshape(-1, planes).T if planes > 1 else chunk.reshape(1, -1)
        setting = plane_setting(self.level, is_float)
        stored: list[bytes | memoryview] = []
        for plane in grouped:
            # As a memoryview: the same bytes, no copy, and a buffer to the type
            # checker (numpy's and zstandard's stubs do not take an ndarray as one).
            plane_bytes = np.ascontiguousarray(plane).data
            packed = compress_plane(plane_bytes, setting)
            stored.append(packed if len(packed) < plane_bytes.nbytes else plane_bytes)
        header = np.array([len(memoryview(s).cast("B")) for s in stored], dtype="<u4")
        return b"".join([header.tobytes(), *stored])

    def decode_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, *,
                    dtype: np.dtype | None = None) -> None:
        decoded = self.decode_planes(stored, out, planes)
        if planes == 1:
            out[:] = np.frombuffer(decoded[0], dtype=np.uint8)
        else:
            unshuffle_into(decoded, out)

    def decode_planes(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray,
                      planes: int) -> list[bytes | memoryview]:
        """The decoded planes of a chunk, checked against the chunk's layout.

        Parameters
        ----------
        stored : bytes, memoryview or numpy.ndarray
            The chunk's stored bytes.
        out : numpy.ndarray
            The 1-D uint8 buffer the chunk decodes into (only its length is used).
        planes : int
            The byte-plane count the index records for the chunk.

        Returns
        -------
        list of bytes or memoryview
            The planes, each ``len(out) // planes`` bytes (raw ones not copied).

        Raises
        ------
        FormatError
            The plane lengths do not add up, or a plane is malformed.
        """
        blobs, plane_len = stored_planes(stored, 0, planes, len(out), "chunk plane header")
        return [decode_plane(blob, plane_len) for blob in blobs]


def stored_planes(stored: bytes | memoryview | np.ndarray, at: int, planes: int, decoded_len: int,
                  header: str) -> tuple[list[memoryview], int]:
    """The stored bytes of each plane of a chunk whose u32 plane lengths
    start at byte ``at`` (codec 1's at 0, codec 4's after its mode bytes),
    and the decoded length of a plane, checked: the lengths fill the chunk
    exactly and ``decoded_len`` splits into ``planes``. ``header`` names the
    header in the error of a chunk too short to hold it."""
    stored = memoryview(stored.data if isinstance(stored, np.ndarray) else stored)
    start = at + 4 * planes
    need(stored, start, header)
    lengths = np.frombuffer(stored[at:start], dtype="<u4").tolist()
    if start + sum(lengths) != len(stored):
        raise FormatError("corrupt chunk: plane lengths do not add up to the chunk")
    plane_len = decoded_len // planes
    if plane_len * planes != decoded_len:
        raise FormatError(f"corrupt chunk: {decoded_len} bytes do not split into {planes} planes")
    ends = np.cumsum([start, *lengths]).tolist()
    return [stored[a:b] for a, b in zip(ends, ends[1:])], plane_len


def plane_setting(level: int | None, is_float: bool):
    """The zstd setting of a plane: ``level``, or, where it is None, the
    float-plane one (:data:`FLOAT_PLANE_PARAMS`) for floats and
    :data:`DEFAULT_LEVEL` for anything else."""
    return level if level is not None else "float-planes" if is_float else DEFAULT_LEVEL


def compress_plane(plane, setting) -> bytes:
    """One zstd frame of a plane's bytes (any buffer), with a
    :func:`plane_setting`; this thread's compressor for it is reused."""
    return _compressor(setting).compress(plane)


def decode_plane(blob: memoryview, plane_len: int) -> bytes | memoryview:
    """Plane bytes: the stored ones (raw, when ``blob`` is ``plane_len``
    long) or zstd's (one frame, checked as docs/format.md §9.2 says), not copied.

    Raises
    ------
    FormatError
        ``blob`` is longer than the plane, or is not one zstd frame of
        exactly ``plane_len`` bytes.
    """
    if len(blob) == plane_len:
        return blob
    if len(blob) > plane_len:
        raise FormatError("corrupt chunk: plane is longer than its decoded size")
    try:
        # A frame declaring its size makes zstandard allocate that much, so
        # the declaration is checked before anything is decompressed.
        declared = zstandard.frame_content_size(blob)
        if declared not in (plane_len, -1):
            raise FormatError(f"corrupt chunk: plane declares {declared} bytes, expected {plane_len}")
        data = _decompressor().decompress(blob, max_output_size=plane_len, allow_extra_data=False)
    except zstandard.ZstdError as exc:
        raise FormatError(f"corrupt chunk: {exc}") from None
    if len(data) != plane_len:
        raise FormatError(f"corrupt chunk: plane decoded to {len(data)} bytes, expected {plane_len}")
    return data
