"""Codec 4's byte planes of a float chunk (docs/format.md §9.5; the reasons:
docs/design/29-exponent-coder.md §2).

Every plane is one byte per element. The exponent field becomes one plane of
whole symbols, the one the writer codes with Huffman. bfloat16 and float32
also move the sign out of the exponent's byte into a mantissa plane stored
raw (ZipNN's rotation): the exponent's low bit would otherwise sit in a
near-random byte, and the sign in the coded one. float16 and the fp8 types
keep their bytes as they are: rotating bits inside a coded symbol never
changes its order-0 entropy, so there is nothing to gain (design §1.2).

The layout numbers are the C kernels' too (``float_split``, ``float_decode``).
This module is the numpy side: :func:`split` and :func:`merge_into`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import NamedTuple

import numpy as np

from lazystore._core.dtypes import lookup
from lazystore.codecs.unshuffle import unshuffle_into

LAYOUT_PLAIN = 0  # plane j is byte j of the element
LAYOUT_BF16 = 1  # plane 0: m6..m0 and the sign in bit 7; plane 1: the 8-bit exponent
LAYOUT_FP32 = 2  # planes 0, 1: bytes 0, 1; plane 2: m22..m16 and the sign in bit 7; plane 3: the exponent


class FloatLayout(NamedTuple):
    """How a dtype's elements split into codec 4's planes."""

    layout: int  # LAYOUT_PLAIN, LAYOUT_BF16 or LAYOUT_FP32
    planes: int  # P: the index's ``planes`` for codec 4 (rule C6)
    exponent_plane: int  # the plane the writer codes with Huffman


# By dtype code (docs/format.md §8). Any other dtype stays on codec 1:
# float64's exponent spans 11 bits, and no data backs a layout for it yet.
LAYOUTS: dict[int, FloatLayout] = {
    15: FloatLayout(LAYOUT_BF16, 2, 1),  # bfloat16
    11: FloatLayout(LAYOUT_FP32, 4, 3),  # float32
    10: FloatLayout(LAYOUT_PLAIN, 2, 1),  # float16: the high byte (s eeeee mm) as one symbol
    **{code: FloatLayout(LAYOUT_PLAIN, 1, 0) for code in range(16, 21)},  # the fp8 types and e8m0: the byte
}


@cache  # asked once per chunk: the dtype table's lookup normalises byte order each time
def layout_of(dtype: np.dtype) -> FloatLayout | None:
    """Codec 4's layout of a dtype.

    Parameters
    ----------
    dtype : numpy.dtype
        The tensor's dtype, in either byte order.

    Returns
    -------
    FloatLayout or None
        Its layout, or None for a dtype codec 4 cannot store.
    """
    spec = lookup(dtype)
    return None if spec is None else LAYOUTS.get(spec.code)


def split(chunk: np.ndarray, layout: int, planes: int) -> np.ndarray:
    """Split a chunk's elements into codec 4's byte planes.

    Parameters
    ----------
    chunk : numpy.ndarray
        The chunk's bytes, 1-D uint8, whole elements.
    layout : int
        ``LAYOUT_PLAIN``, ``LAYOUT_BF16`` or ``LAYOUT_FP32``.
    planes : int
        The layout's plane count (the element's size in bytes).

    Returns
    -------
    numpy.ndarray
        A ``(planes, elements)`` uint8 array, plane j in row j.
    """
    if layout == LAYOUT_PLAIN:
        return np.ascontiguousarray(chunk.reshape(-1, planes).T)
    if layout == LAYOUT_BF16:
        x = chunk.view("<u2")
        out = np.empty((2, len(x)), np.uint8)
        out[0] = (x & 0x7F) | ((x >> 8) & 0x80)
        out[1] = (x >> 7) & 0xFF
        return out
    if layout == LAYOUT_FP32:
        x = chunk.view("<u4")
        out = np.empty((4, len(x)), np.uint8)
        out[:2] = chunk.reshape(-1, 4)[:, :2].T
        out[2] = ((x >> 16) & 0x7F) | ((x >> 24) & 0x80)
        out[3] = (x >> 23) & 0xFF
        return out
    raise ValueError(f"unknown float layout {layout}")


def merge_into(planes: Sequence, out: np.ndarray, layout: int) -> None:
    """Merge codec 4's byte planes back into elements: :func:`split` undone.

    Parameters
    ----------
    planes : sequence of buffers
        The planes, each one byte per element.
    out : numpy.ndarray
        1-D uint8 of their total size, filled with the elements.
    layout : int
        ``LAYOUT_PLAIN``, ``LAYOUT_BF16`` or ``LAYOUT_FP32``.
    """
    views = [np.frombuffer(p, dtype=np.uint8) for p in planes]
    if layout == LAYOUT_PLAIN:
        if len(views) == 1:
            out[:] = views[0]
        else:
            unshuffle_into(views, out)
        return
    if layout == LAYOUT_BF16:
        p0, p1 = views
        x = out.view("<u2")
        np.copyto(x, p1)
        x <<= 7
        x |= p0 & 0x7F
        x |= (p0 & 0x80).astype(np.uint16) << 8
        return
    if layout == LAYOUT_FP32:
        p0, p1, p2, p3 = views
        x = out.view("<u4")
        np.copyto(x, p3)
        x <<= 23
        x |= (p2 & 0x7F).astype(np.uint32) << 16
        x |= (p2 & 0x80).astype(np.uint32) << 24
        low = out.reshape(-1, 4)
        low[:, 0] = p0
        low[:, 1] = p1
        return
    raise ValueError(f"unknown float layout {layout}")
