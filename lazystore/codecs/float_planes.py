"""Codec 4 (format 1.5): float planes with a Huffman-coded exponent.

A chunk of floats is split into byte planes laid out per dtype so that the
exponent is one plane of whole symbols (:mod:`lazystore.codecs.float_layout`).
The exponent plane is coded with canonical Huffman, in a few interleaved
streams a decoder runs in lockstep (:mod:`lazystore.codecs.huffman_code`);
the other planes are zstd frames exactly as codec 1's, or stored raw.
Codec 1 codes the same exponents with zstd's own Huffman stage, so the coder
itself gains nothing: the gain is the sign moved out of the exponent's byte
and zstd's framing dropped, and the decoder fuses un-shuffling into
decoding (docs/design/29-exponent-coder.md has the figures).

Stored chunk (docs/format.md §9.5)::

    mode_j (u8 per plane: 0 raw, 1 zstd, 2 Huffman) | zero pad to 4 bytes
    | len_j (u32 per plane) | the planes, back to back

Every plane is one byte per element. A raw plane is exactly that long; a
coded one (zstd or Huffman) is shorter, or the writer stores it raw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lazystore._core.scratch import scratch
from lazystore._core.short_reads import need
from lazystore.codecs import compiled, huffman_code
from lazystore.codecs.base import Codec
from lazystore.codecs.float_layout import LAYOUT_PLAIN, FloatLayout, layout_of, merge_into, split
from lazystore.codecs.zstd import (
    ZstdPlanes,
    check_level,
    compress_plane,
    decode_plane,
    plane_setting,
    stored_planes,
)
from lazystore.errors import FormatError

MODE_RAW, MODE_ZSTD, MODE_HUFFMAN = 0, 1, 2
# A plane other than the exponent's is stored as a zstd frame only where
# that saves at least this fraction of it: decoding a raw plane is a copy
# (bf16's sign+mantissa plane saves nothing; fp32's low planes 1.7-3.7%).
PLANE_MIN_SAVING = 0.01
# An exponent plane of fewer symbols than this is coded by zstd alone: in a
# small tensor (a bias, a norm's weights) the Huffman table and the search
# for its code lengths cost more than they save, and zstd codes so few
# symbols about as small, in a tenth of the time.
HUFFMAN_MIN_SYMBOLS = 2048


def mode_bytes(planes: int) -> int:
    """Where a codec-4 chunk's plane lengths start.

    Parameters
    ----------
    planes : int
        The chunk's plane count.

    Returns
    -------
    int
        Its ``planes`` mode bytes, padded with zeros to a multiple of 4.
    """
    return -(-planes // 4) * 4


def header_bytes(planes: int) -> int:
    """The fixed header of a codec-4 chunk: the least it stores (rule C3).

    Parameters
    ----------
    planes : int
        The chunk's plane count.

    Returns
    -------
    int
        The bytes of its modes, their pad and its plane lengths.
    """
    return mode_bytes(planes) + 4 * planes


@dataclass(frozen=True)
class FloatPlanes(Codec):
    """Codec 4: float planes, the exponent Huffman-coded (``compression="huffman"``).

    Only float16, bfloat16, float32 and the one-byte float types have a
    layout: :meth:`for_dtype` gives codec 1 for any other dtype, so one
    ``compression="huffman"`` covers a whole state dict, its integer
    buffers included.

    Parameters
    ----------
    level : int or None, optional
        A zstd level for the planes stored as zstd frames (and for the
        tensors stored as codec 1); None tunes it per dtype, as codec 1 does.

    Raises
    ------
    InvalidInputError
        ``level`` is not one of zstd's levels.
    """

    level: int | None = None

    id = 4
    name = "huffman"
    since: ClassVar[int] = 5  # format 1.5 (layout.EXPONENT_MINOR)

    def __post_init__(self) -> None:
        check_level(self.level)

    def planes_for(self, itemsize: int) -> int:
        return itemsize  # every layout's plane count is its dtype's item size

    def for_dtype(self, dtype: np.dtype) -> Codec:
        return self if layout_of(dtype) is not None else ZstdPlanes(self.level)

    def encode(self, chunk: np.ndarray, planes: int, is_float: bool, *, dtype: np.dtype | None = None) -> bytes:
        layout = _layout(dtype, planes)
        split_planes = _split(chunk, layout)
        setting = plane_setting(self.level, True)
        coded = [_code_plane(plane, j == layout.exponent_plane, layout.layout == LAYOUT_PLAIN, setting)
                 for j, plane in enumerate(split_planes)]
        head = bytearray(mode_bytes(layout.planes))
        head[: layout.planes] = bytes(mode for mode, _ in coded)
        lengths = np.array([len(blob) for _, blob in coded], dtype="<u4")
        return b"".join([bytes(head), lengths.tobytes(), *(blob for _, blob in coded)])

    def decode_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, *,
                    dtype: np.dtype | None = None) -> None:
        layout = _layout(dtype, planes)
        modes, blobs, plane_len = _parse_chunk(stored, len(out), layout.planes)
        kernels = compiled.kernels
        if kernels is not None:
            # Huffman planes are decoded in L1-sized blocks and merged straight
            # into ``out``: no plane-sized buffer for the exponents. Given the
            # modes, the kernel parses a Huffman plane's header itself, with
            # huffman_code.parse_plane's refusals (parsing in Python was a
            # noticeable part of a chunk's decode).
            try:
                kernels.float_decode(out, layout.layout, blobs, modes)
            except ValueError as exc:
                raise FormatError(f"corrupt chunk: {exc}") from None
            return
        merge_into([huffman_code.decode_plane(blob, plane_len) if mode == MODE_HUFFMAN else blob
                    for mode, blob in zip(modes, blobs)], out, layout.layout)


def _layout(dtype: np.dtype | None, planes: int) -> FloatLayout:
    """The layout of a codec-4 chunk's dtype, which the index's rule C6
    guarantees for a chunk read from a file; a FormatError all the same
    when it is missing, not an IndexError."""
    layout = None if dtype is None else layout_of(dtype)
    if layout is None or layout.planes != planes:
        raise FormatError(f"corrupt chunk: codec 4 has no layout of {planes} planes for dtype {dtype}")
    return layout


def _split(chunk: np.ndarray, layout: FloatLayout) -> np.ndarray:
    """The chunk's planes, a ``(planes, elements)`` uint8 array, valid until
    this thread splits another chunk."""
    kernels = compiled.kernels
    if kernels is None:
        return split(chunk, layout.layout, layout.planes)
    out = scratch("float planes split", len(chunk)).reshape(layout.planes, -1)
    kernels.float_split(chunk, layout.layout, layout.planes, out)
    return out


def _code_plane(plane: np.ndarray, exponent: bool, plain: bool, setting: object) -> tuple[int, bytes | memoryview]:
    """A plane's mode and stored bytes (design §5): the exponent plane
    Huffman-coded (zstd where it is constant, whose one symbol Huffman
    cannot code, or shorter than :data:`HUFFMAN_MIN_SYMBOLS`), any other zstd where that saves at least
    :data:`PLANE_MIN_SAVING`; raw when the coded bytes are not shorter.

    In a ``plain`` layout (float16, the 8-bit floats) the exponent's byte
    also holds the sign and mantissa bits, so its alphabet is wide and
    zstd's matches can beat Huffman (on fp8, and by 0.04% on fp16 of trained
    weights): there both are tried and the shorter kept, which keeps
    "auto" about as small as "zstd" on them. bf16 and fp32 skip the second
    coding (it would cost save time): their exponent plane, the sign
    rotated out, is order-0 data, where Huffman wins."""
    raw = plane.data
    m = len(plane)
    candidates: list[tuple[int, bytes | memoryview]] = []
    if exponent and m < HUFFMAN_MIN_SYMBOLS:
        packed = compress_plane(raw, setting)
        return (MODE_ZSTD, packed) if len(packed) < m else (MODE_RAW, raw)
    if exponent:
        huffman = huffman_code.encode_plane(plane)
        if huffman is not None:
            candidates.append((MODE_HUFFMAN, huffman))
        if huffman is None or plain:
            candidates.append((MODE_ZSTD, compress_plane(raw, setting)))
        best = min(candidates, key=lambda c: len(c[1]))
        return best if len(best[1]) < m else (MODE_RAW, raw)
    packed = compress_plane(raw, setting)
    return (MODE_ZSTD, packed) if len(packed) <= (1 - PLANE_MIN_SAVING) * m else (MODE_RAW, raw)


def _parse_chunk(stored: bytes | memoryview | np.ndarray, decoded_len: int, planes: int) -> tuple[bytes, list, int]:
    """A chunk's plane modes, its planes' bytes (a zstd plane decoded, a
    Huffman plane as stored) and the plane length, every header rule of
    docs/format.md §9.5 checked."""
    stored = memoryview(stored.data if isinstance(stored, np.ndarray) else stored)
    need(stored, header_bytes(planes), "codec 4 chunk header")
    modes = bytes(stored[:planes])
    bad = [mode for mode in modes if mode > MODE_HUFFMAN]
    if bad:
        raise FormatError(f"corrupt chunk: plane mode {bad[0]} (0 raw, 1 zstd, 2 Huffman)")
    if any(stored[planes : mode_bytes(planes)]):
        raise FormatError("corrupt chunk: the padding after the plane modes is not zero")
    blobs, plane_len = stored_planes(stored, mode_bytes(planes), planes, decoded_len, "codec 4 chunk header")
    for j, (mode, blob) in enumerate(zip(modes, blobs)):
        if mode == MODE_RAW and len(blob) != plane_len:
            raise FormatError(f"corrupt chunk: raw plane {j} is {len(blob)} bytes, not {plane_len}")
        if mode != MODE_RAW and len(blob) >= plane_len:
            raise FormatError(f"corrupt chunk: coded plane {j} is {len(blob)} bytes, not shorter than {plane_len}")
    return modes, [decode_plane(blob, plane_len) if mode == MODE_ZSTD else blob
                   for mode, blob in zip(modes, blobs)], plane_len
