"""The chunk grid: how a tensor is cut into independently stored chunks.

A tensor of shape ``(d0, ..., dn-1)`` is chunked along one axis ``k`` in
blocks of ``extent`` indices. Chunk ``(p, b)``, for a multi-index ``p`` over
axes ``0..k-1`` and a block ``b`` of axis ``k``, covers indices
``[b*extent, min((b+1)*extent, dk))`` of axis ``k`` and every index of the
axes after ``k``. Because the chunk is full along every later axis it is one
contiguous run of the C-order array, so raw chunks are plain byte ranges of
the tensor. Chunks are numbered in C order over the grid
``(d0, ..., dk-1, ceil(dk / extent))``.

The writer picks the first axis whose trailing sub-array fits the target
chunk size, so a chunk is never larger than the target (unless one element
is): a (4096, 4096) float32 tensor gets 64-row chunks, a (1, 32000, 4096)
one gets chunks of 64 rows of its second axis.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

DEFAULT_CHUNK_BYTES = 1 << 20


def choose_grid(shape: tuple[int, ...], itemsize: int, target_bytes: int) -> tuple[int, int]:
    """(axis, extent) for a tensor; (0, 0) for a tensor without elements."""
    if math.prod(shape) == 0:
        return 0, 0
    if not shape:
        return 0, 1
    inner = itemsize
    axis = len(shape) - 1
    # Walk outwards while the sub-array behind the next axis still fits.
    while axis > 0 and inner * shape[axis] <= target_bytes:
        inner *= shape[axis]
        axis -= 1
    extent = max(1, min(shape[axis], target_bytes // inner))
    return axis, extent


class ChunkGrid(NamedTuple):
    """A tensor's chunk grid (a tuple: cheap to build for every entry read)."""

    shape: tuple[int, ...]
    itemsize: int
    axis: int
    extent: int

    @property
    def _axis_len(self) -> int:
        return self.shape[self.axis] if self.shape else 1

    @property
    def inner_nbytes(self) -> int:
        """Bytes of the sub-array behind the chunked axis (one 'row')."""
        return math.prod(self.shape[self.axis + 1 :]) * self.itemsize

    @property
    def n_blocks(self) -> int:
        return -(-self._axis_len // self.extent) if self.extent else 0

    @property
    def n_chunks(self) -> int:
        if self.extent == 0:
            return 0
        return math.prod(self.shape[: self.axis]) * self.n_blocks

    def raw_nbytes(self) -> list[int]:
        """Decoded length of each chunk, in chunk order: for every index of
        the axes before the chunk axis, its blocks along that axis, each
        ``extent`` rows long but the last, which holds the rest."""
        axis_len = self._axis_len
        if not self.extent or not axis_len:
            return []
        blocks = -(-axis_len // self.extent)
        row = self.inner_nbytes
        per_prefix = [self.extent * row] * (blocks - 1) + [(axis_len - (blocks - 1) * self.extent) * row]
        return per_prefix * math.prod(self.shape[: self.axis])

    def chunks_for(self, selection: list[range]) -> np.ndarray:
        """Sorted ids of the chunks holding any element of a selection.

        ``selection`` has one range of selected indices per axis. The work is
        bounded by the number of chunks touched, never by the tensor's size.
        """
        if self.n_chunks == 0 or any(len(r) == 0 for r in selection):
            return np.zeros(0, dtype=np.int64)
        if not self.shape:
            return np.zeros(1, dtype=np.int64)
        per_axis = [np.arange(r.start, r.stop, r.step) for r in map(_ascending, selection[: self.axis])]
        per_axis.append(_blocks_touched(_ascending(selection[self.axis]), self.extent))
        grid = self.shape[: self.axis] + (self.n_blocks,)
        ids = np.ravel_multi_index(np.ix_(*per_axis), grid)
        return np.asarray(ids, dtype=np.int64).ravel()

    def slice_plan(self, selection: list[range]) -> SlicePlan:
        """How to read a selection chunk by chunk into a box that holds
        exactly the selected elements, every axis in ascending order (see
        :class:`SlicePlan`): memory is the selection's size, never the
        tensor's, and each chunk is decoded on its own."""
        if not self.shape:  # a 0-d tensor is one chunk of one element
            return SlicePlan((), [0] if self.n_chunks else [], [((), ())])
        up = [_ascending(r) if len(r) else r for r in selection]
        box_shape = tuple(len(r) for r in up)
        ids = self.chunks_for(selection).tolist()
        k, e = self.axis, self.extent
        prefix_grid = self.shape[:k] + (self.n_blocks,)
        trailing = tuple(slice(r.start, r.stop, r.step) for r in up[k + 1 :])
        parts = []
        for c in ids:
            *prefix, b = np.unravel_index(c, prefix_grid)
            a, lo = up[k], int(b) * e
            # The picks of axis k inside block b: a[i0:i1].
            i0 = max(0, -(-(lo - a.start) // a.step))
            i1 = min(len(a), -(-(lo + e - a.start) // a.step))
            src = (slice(a[i0] - lo, a[i1 - 1] - lo + 1, a.step),) + trailing
            dst = tuple((int(p) - up[j].start) // up[j].step for j, p in enumerate(prefix)) + (slice(i0, i1),)
            parts.append((dst, src))
        return SlicePlan(box_shape, ids, parts)

    def chunk_shape(self, c: int) -> tuple[int, ...]:
        """Shape of chunk ``c``'s elements: its rows of the chunk axis, then
        every later axis (the axes before it are one index each)."""
        if not self.shape:
            return ()
        b = c % self.n_blocks
        rows = min(self.extent, self._axis_len - b * self.extent)
        return (rows,) + self.shape[self.axis + 1 :]


class SlicePlan(NamedTuple):
    """A selection of a tensor, read chunk by chunk (``ChunkGrid.slice_plan``).

    ``box_shape`` is the selection's shape with every axis ascending (int
    picks included, as axes of length 1). For each chunk in ``ids``,
    ``parts`` holds ``(dst, src)``: ``box[dst] = chunk[src]``, where
    ``chunk`` is the chunk's elements shaped ``ChunkGrid.chunk_shape(c)``.
    """

    box_shape: tuple[int, ...]
    ids: list[int]
    parts: list[tuple[tuple, tuple]]


def _ascending(r: range) -> range:
    return r if r.step > 0 else range(r[-1], r[0] + 1, -r.step)


def _blocks_touched(r: range, extent: int) -> np.ndarray:
    first, last = r[0] // extent, r[-1] // extent
    if r.step <= extent:  # consecutive picks are at most one block apart
        return np.arange(first, last + 1)
    # Each pick lands in its own block, so there are fewer picks than blocks.
    return np.arange(r.start, r.stop, r.step) // extent
