"""Covering a tensor with blocks of bounded size, for reading it in pieces.

Basic indexes (slices) that cover a C-order tensor in order with contiguous
blocks: concatenated, the blocks' bytes are the tensor's bytes. Copying and
comparing tensors larger than memory read them this way.
"""

from __future__ import annotations

import math
from collections.abc import Iterator


def blocks(shape: tuple[int, ...], itemsize: int, limit: int) -> Iterator[tuple]:
    """Indexes that cover a C-order tensor in contiguous blocks of at most
    ``limit`` bytes (or one row of its last axis, if that is larger)."""
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    row = math.prod(shape[1:]) * itemsize
    if row <= limit or len(shape) == 1:
        step = max(1, limit // row)
        for i in range(0, shape[0], step):
            yield (slice(i, min(i + step, shape[0])),)
        return
    for i in range(shape[0]):
        for rest in blocks(shape[1:], itemsize, limit):
            yield (slice(i, i + 1),) + rest
