"""What every sink is, and what every writer built on one does in a ``with`` block.

A sink takes a checkpoint's bytes in order (``write``), then either
publishes them whole at the target (``commit``) or throws them away
(``abort``, also run if the sink is dropped unfinished). Either way a reader
of the target sees the previous checkpoint or the new one, never a mix or a
part. ``closed`` is true once either has run.
"""

from __future__ import annotations


class Sink:
    """What a sink offers beyond ``write``: ``write_many``, for a writer's
    window of chunks. Sinks that gain nothing from having them together
    write them one by one."""

    def write_many(self, blobs) -> list[int]:
        """Write ``blobs`` in order; their lengths."""
        return [self.write(blob) for blob in blobs]


def byte_view(data) -> memoryview:
    """``data``'s bytes as a flat memoryview of unsigned bytes (no copy)."""
    view = memoryview(data)
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def split_views(views: list[memoryview], n: int) -> tuple[list[memoryview], list[memoryview]]:
    """``views`` (flat byte views) cut after their first ``n`` bytes: (those, the rest)."""
    head: list[memoryview] = []
    for i, view in enumerate(views):
        if n <= 0:
            return head, views[i:]
        if len(view) > n:
            return [*head, view[:n]], [view[n:], *views[i + 1 :]]
        head.append(view)
        n -= len(view)
    return head, []


class CloseOrAbort:
    """``with`` support for writers: close (commit) when the block ends
    normally, abort (discard everything) when it raises."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
