"""Cutting a run of items into batches of about a given number of bytes.

For work measured in bytes rather than items: the chunk reader checks small
tensors a batch per pool task (one task per tensor would cost more than
checking it), and ``lazystore verify`` moves its progress bar a batch at a
time. Both want the same cut, so it is made here once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def batch_by_bytes(items: Iterable[T], nbytes: int, size: Callable[[T], int]) -> Iterator[list[T]]:
    """Consecutive ``items`` in lists that each hold at least ``nbytes``
    (counted by ``size``), the last one excepted.

    A batch ends with the item that brings it to ``nbytes``: items are never
    split, so an item of ``nbytes`` or more ends its batch, and order is kept.
    Lazy: each batch is yielded as soon as it is full."""
    batch: list[T] = []
    total = 0
    for item in items:
        batch.append(item)
        total += size(item)
        if total >= nbytes:
            yield batch
            batch, total = [], 0
    if batch:
        yield batch
