"""The rules of one index entry (docs/format.md §13.4), written once.

- What an entry's small fields, sizes and dims describe (E1-E5, E7-E13):
  :func:`describe`, in Python integers, which cannot overflow. Checkpoints
  repeat a few descriptions (dtype, shape, grid) many times, so a reader
  checks each distinct one once.
- Its chunk records (C1-C3) and its place in the file (L2-L4):
  :func:`chunk_and_place_rules`, written with plain operators (comparisons,
  ``+ // *``, ``&`` and ``|`` of truth values) over the entry's fields, so
  that the same code checks one entry in Python integers (:class:`One`)
  or a whole batch in numpy arrays (see :mod:`lazystore._native.entry_batch`).
  Offsets and sizes are untrusted uint64s: each is capped at ``data_end +
  1`` before two are added, so no uint64 sum wraps, and every comparison
  with ``data_end`` comes out as it would for the true values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from lazystore._core.chunking import ChunkGrid
from lazystore._core.dtypes import BY_CODE
from lazystore._native import layout as fmt
from lazystore.codecs import CODECS_BY_ID, ContentDeltaPlanes, DeltaPlanes, FloatPlanes
from lazystore.codecs.float_layout import LAYOUTS
from lazystore.codecs.sealed import SEALED_BASE, SealedFloatPlanes, SealedRaw
from lazystore.errors import FormatError

MAX_NDIM = 64  # numpy's own limit
# Rules E7/E8: dims, and sizes computed from them, stay below 2**62, so any
# reader can multiply them in 64-bit integers.
MAX_SIZE = 1 << 62
# A zstd frame expands at most 32768-fold (a 4-byte RLE block yields 128 KiB),
# so a chunk claiming more than this per stored byte is lying.
MAX_EXPANSION = 1 << 15
DELTA_CODEC = DeltaPlanes.id  # format 1.2: a base identified by its index checksum
CONTENT_DELTA_CODEC = ContentDeltaPlanes.id  # format 1.3: a base identified by its chunks' content
SEALED_RAW_CODEC = SealedRaw.id  # format 1.4: codec 0, sealed (rule S1)
# Format 1.5: codec 4 (float planes, the exponent Huffman-coded) and 132, codec 4 sealed (rule C6).
EXPONENT_CODECS = frozenset({FloatPlanes.id, SealedFloatPlanes.id})
TAG_BYTES = 16  # a sealed chunk's AES-GCM tag (rules S1, S2)


class Description(NamedTuple):
    """What an entry's small fields, sizes and dims describe, once checked."""

    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int  # decoded size
    grid: ChunkGrid
    codec: int
    planes: int
    decoded: tuple[int, ...]  # decoded length of each chunk


class Layout(NamedTuple):
    """Where an index's tensors may lie (rules L2-L4, docs/format.md §6)."""

    packed: bool  # a lazystore file: tensors back to back, aligned, in index order
    data_start: int
    data_end: int  # where the index starts (a foreign file: where its data must end)
    alignment: int
    n_tensors: int  # tensors in the index (not ``count``, which would shadow tuple.count)
    minor: int | None = None  # the file's minor version (rules C4, C5); None for a foreign file
    base_checksums: bool = False  # its chunk records hold base checksums (format 1.3, rule C5)
    no_base_digests: bool = False  # it has chunk digests but records without base digests (format 1.4, rule G1)


class Fields(NamedTuple):
    """The fields of an entry (Python values), or of a batch (numpy arrays,
    one item per entry), that the chunk and place rules read."""

    # Any: each field is a Python int or bool for one entry, a numpy array
    # for a batch; the rules use only operators both have.
    offset: Any  # data_offset
    stored_nbytes: Any
    raw: Any  # codec 0 (true or false)
    compressed: Any  # codec 1, 2, 3, 4, 129 or 132: stored with a plane header
    delta: Any  # codec 2 or 3: a chunk of no bytes is one equal to the base's
    content: Any  # codec 3: a delta against a base identified by content
    strict: Any  # not a delta: every compressed chunk holds its plane header
    planes: Any
    expected: Any  # where the previous tensor's padding ends (entry 0: the data region's start)
    last: Any  # the index's last entry (true or false)
    sealed_raw: Any = False  # codec 128: codec 0 sealed (rule S1)
    sealed: Any = False  # codec 128, 129 (format 1.4) or 132 (format 1.5)
    tag: Any = 0  # the bytes a sealed chunk adds to its inner one: 16 where sealed, else 0
    exponent: Any = False  # codec 4 or 132 (format 1.5, rule C6)
    modes: Any = 0  # the bytes of plane modes (and their padding) before a codec-4 chunk's plane lengths, else 0


def describe(small: int, nbytes: int, count: int, extent: int, dims: tuple[int, ...]) -> Description:
    """Rules E1-E5 and E7-E13 of an entry whose small fields (dtype, codec,
    ndim, chunk axis, planes, reserved bytes) are packed in ``small``."""
    code, codec, ndim, axis, planes = small & 0xFF, small >> 8 & 0xFF, small >> 16 & 0xFF, small >> 24 & 0xFF, \
        small >> 32 & 0xFF
    _check_small_fields(code, codec, ndim, axis, planes, small >> 40)
    dtype = BY_CODE[code].dtype
    grid = ChunkGrid(dims, dtype.itemsize, axis, extent)
    _check_shape(grid, nbytes)
    _check_grid(grid, nbytes, count)
    return Description(dtype, grid.shape, nbytes, grid, codec, planes, tuple(grid.raw_nbytes()))


def _check_small_fields(code: int, codec: int, ndim: int, axis: int, planes: int, reserved: int) -> None:
    """Rules E1-E5 and E10."""
    if reserved:
        raise FormatError("reserved entry bytes are not zero")
    if code not in BY_CODE:
        raise FormatError(f"unknown dtype code {code}")
    if codec not in CODECS_BY_ID:
        raise FormatError("unknown codec")
    if codec in (0, SEALED_BASE) and planes != 1:  # raw, or raw sealed (rule S1)
        raise FormatError("raw tensor with byte planes")
    if codec != 0 and planes not in (1, BY_CODE[code].dtype.itemsize):
        raise FormatError("invalid byte plane count")
    if codec in EXPONENT_CODECS and (code not in LAYOUTS or planes != LAYOUTS[code].planes):  # rule C6
        raise FormatError(f"codec {codec} with dtype {BY_CODE[code].name} in {planes} planes (codec 4 stores "
                          "float16, bfloat16 and float32 in as many planes as bytes, and the 8-bit floats)")
    if ndim > MAX_NDIM:
        raise FormatError(f"more than {MAX_NDIM} dimensions")
    if axis >= max(ndim, 1):
        raise FormatError("chunk axis out of range")


def size_problem(shape: tuple[int, ...], itemsize: int) -> str | None:
    """Rules E7-E8 for any tensor lazystore reads or writes (its own files,
    safetensors headers, DCP metadata): what is wrong with ``shape`` of
    items of ``itemsize`` bytes, or None. In Python integers, which cannot
    overflow.

    The bytes the shape spans, counting a dim of 0 as 1, stay below 2**62.
    The zeros count as ones because a reader builds the shape even when it
    holds no element, and numpy refuses an array whose non-zero dims times
    its itemsize reach 2**63, empty or not (``np.empty((0, 2**61), float64)``
    raises ValueError)."""
    if shape and max(shape) >= MAX_SIZE:
        return "dimension too large (each must be below 2**62)"
    if math.prod(d or 1 for d in shape) * itemsize >= MAX_SIZE:
        return "tensor size overflows (its dims, zeros counted as ones, times its item size must stay below 2**62)"
    return None


def _check_shape(grid: ChunkGrid, nbytes: int) -> None:
    """Rules E7-E9: the size fits, and matches dtype x shape."""
    problem = size_problem(grid.shape, grid.itemsize)
    if problem is not None:
        raise FormatError(problem)
    if math.prod(grid.shape) * grid.itemsize != nbytes:
        raise FormatError("byte size does not match dtype x shape")


def _check_grid(grid: ChunkGrid, nbytes: int, count: int) -> None:
    """Rules E11-E13: the chunk grid, and the chunk count it implies."""
    if nbytes == 0:
        if grid.extent or grid.axis or count:
            raise FormatError("empty tensor with chunks")
        return
    if not 1 <= grid.extent <= (grid.shape[grid.axis] if grid.shape else 1):
        raise FormatError("chunk extent out of range")
    if count != grid.n_chunks:
        raise FormatError("chunk count does not match the chunk grid")


# -- chunk records (C1-C3) and place in the file (L2-L4) ------------------------------------------


# A rule's message (or, for L4, a function of the entry's end giving it) and
# its verdict: a bool for one entry, a bool array for a batch.
Broken = list[tuple[str | Callable[[int], str], Any]]


def chunk_and_place_rules(e: Fields, chunks, layout: Layout) -> tuple[Broken, Any]:
    """``(message, broken)`` for rules C1-C3 and L2-L4 in §13.4's order, and
    where the padding ends, for entries whose description passed.

    ``chunks`` gives the entries' chunk records: ``any(test)`` is whether
    ``test(stored length, decoded length)`` holds for any chunk of an
    entry, ``spread(field)`` a field of the entry beside each of its
    chunks, ``sum_differs(totals)`` whether an entry's stored lengths do
    not add up to its total (exactly), ``minimum`` the element-wise one.
    The message of L4 is a function of the entry's exact end. Where the
    padding ends is an int for one entry, an array for a batch."""
    limit = layout.data_end
    header = 4 * chunks.spread(e.planes) + chunks.spread(e.modes)  # codec 4: its mode bytes too (C3)
    tag = chunks.spread(e.tag)  # rule S2: C3 applies to a sealed chunk less its tag
    strict = chunks.spread(e.strict)
    broken: Broken = [
        ("chunk lengths add up to more than the file", chunks.any(lambda s, d: s > limit)),  # C1
        ("raw chunk length differs from its decoded length", e.raw & chunks.any(lambda s, d: s != d)),  # C2
        ("compressed chunk shorter than its plane header",
         e.compressed & chunks.any(lambda s, d: (s < header + tag) & ((s != 0) | strict))),  # C3, S2
        ("compressed chunk claims an impossible expansion",
         e.compressed & chunks.any(lambda s, d: (d // MAX_EXPANSION + tag > s) & ((s != 0) | strict))),  # C3, S2
        (f"sealed raw chunk length is not its decoded length plus the {TAG_BYTES}-byte tag",
         e.sealed_raw & chunks.any(lambda s, d: s != d + TAG_BYTES)),  # S1
        (f"delta codec in a format 1.{layout.minor} file (codec {DELTA_CODEC} is format 1.2, "
         f"{CONTENT_DELTA_CODEC} format 1.3)", e.delta & _older_than(layout, 2)),  # C4
        (f"codec {CONTENT_DELTA_CODEC} in a format 1.{layout.minor} file (it is format 1.3)",
         e.content & _older_than(layout, 3)),  # C5
        (f"codec {CONTENT_DELTA_CODEC} but chunk records without base checksums",
         e.content & (not layout.base_checksums)),  # C5
        (f"codec 4 in a format 1.{layout.minor} file (codecs 4 and 132 are format 1.{fmt.EXPONENT_MINOR})",
         e.exponent & _older_than(layout, fmt.EXPONENT_MINOR)),  # C6
        (f"sealed codec in a format 1.{layout.minor} file (codecs 128 and 129 are format 1.4)",
         e.sealed & _older_than(layout, 4)),  # S3
        (f"codec {CONTENT_DELTA_CODEC} in a file with chunk digests but chunk records without base digests",
         e.content & layout.no_base_digests),  # G1
        ("stored size differs from the sum of its chunks", chunks.sum_differs(e.stored_nbytes)),  # L2
    ]
    if not layout.packed:
        end = capped_end(e.offset, e.stored_nbytes, layout, chunks.minimum)
        return broken + [("data beyond the end of the file", end > limit)], end
    padding_end = padding_end_of(e.offset, e.stored_nbytes, layout, chunks.minimum)
    return broken + [
        ("data offset beyond the index", e.offset > limit),  # L3
        ("data offset before the data region", e.offset < layout.data_start),  # L3
        ("data offset is not where the previous tensor ends", e.offset != e.expected),  # L3
        (lambda end: f"the index starts at {limit} but the data ends at {_align_up(end, layout.alignment)}",
         (padding_end > limit) | (e.last & (padding_end != limit))),  # L4
    ], padding_end


def _older_than(layout: Layout, minor: int) -> bool:
    """Is the file of a minor version before ``minor`` (a foreign file is not)?"""
    return layout.minor is not None and layout.minor < minor


def capped_end(offset, stored_nbytes, layout: Layout, minimum):
    """``offset + stored_nbytes``, or more than ``data_end`` when that is."""
    over = layout.data_end + 1
    return minimum(offset, over) + minimum(stored_nbytes, over)


def padding_end_of(offset, stored_nbytes, layout: Layout, minimum):
    """Where a tensor's padding ends (rule L3's place of the next one), or
    more than ``data_end`` when that is."""
    a = layout.alignment
    return (minimum(capped_end(offset, stored_nbytes, layout, minimum), layout.data_end + 1) + (a - 1)) // a * a


class One:
    """One entry's chunk records, as :func:`chunk_and_place_rules` reads
    them, in Python integers."""

    minimum = staticmethod(min)

    def __init__(self, stored: tuple[int, ...], decoded: tuple[int, ...]):
        self.stored, self.decoded = stored, decoded

    def any(self, test) -> bool:
        return any(map(test, self.stored, self.decoded))

    def spread(self, field):
        return field

    def sum_differs(self, total: int) -> bool:
        return sum(self.stored) != total


def first_broken(broken: Broken, offset: int, stored_nbytes: int) -> str | None:
    """The message of the first rule one entry breaks, or None."""
    for message, verdict in broken:
        if verdict:
            return message(offset + stored_nbytes) if callable(message) else message
    return None


def _align_up(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment
