"""What every sink is, and what every writer built on one does in a ``with`` block.

A sink takes a checkpoint's bytes in order (``write``), then either
publishes them whole at the target (``commit``) or throws them away
(``abort``, also run if the sink is dropped unfinished). Either way a reader
of the target sees the previous checkpoint or the new one, never a mix or a
part. ``closed`` is true once either has run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar


class Sink(ABC):
    """Where a writer's bytes go (see the module docstring)."""

    # A sink that can write the file's first bytes again once the rest is
    # written (a local file) sets this to a method taking those bytes; the
    # writer then states the exact format version in the preamble.
    rewrite_head: ClassVar[Callable[..., None] | None] = None

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once ``commit`` or ``abort`` has run."""

    @abstractmethod
    def write(self, data) -> int:
        """Append ``data`` (any buffer); its length."""

    def write_many(self, blobs) -> list[int]:
        """Write ``blobs`` in order; their lengths. Sinks that gain nothing
        from having a writer's window of chunks together write them one by one."""
        return [self.write(blob) for blob in blobs]

    @abstractmethod
    def commit(self) -> None:
        """Publish what was written, whole, at the target."""

    @abstractmethod
    def abort(self) -> None:
        """Throw away what was written; the target keeps what it had. Never raises."""


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


class CloseOrAbort(ABC):
    """``with`` support for writers: close (commit) when the block ends
    normally, abort (discard everything) when it raises. A mixin: the class
    using it supplies ``close`` and ``abort``."""

    @abstractmethod
    def close(self) -> None:
        """Publish what was written."""

    @abstractmethod
    def abort(self) -> None:
        """Discard what was written."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
