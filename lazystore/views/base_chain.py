"""A delta file's base: found beside it, opened on first use, checked.

A tensor stored with codec 2 holds only its difference from the tensor of
the same name in the base file (docs/format.md §9.3), so reading it reads
the base's chunk first, which may itself be a delta against its own base:
each file of a chain holds a :class:`BaseLink` to the next. The base is
opened only when a delta chunk is first decoded (or verified), so opening
a delta file still reads one index.

Whatever goes wrong with the base -- missing, not a lazystore file,
replaced or rewritten since (its index checksum differs from the one the
delta file recorded), a tensor that does not match -- is a
:class:`~lazystore.errors.BaseCheckpointError` naming the base file:
never data decoded against the wrong bytes.
"""

from __future__ import annotations

import os
import threading

from lazystore._native.base_ref import BaseRef
from lazystore._native.index import Entry
from lazystore.errors import BaseCheckpointError, FormatError, TensorNotFoundError

# Longest chain of bases a read follows. The index checksums make a cycle
# impossible to write, but a hostile file could still claim a long chain.
MAX_CHAIN = 64


def sibling(location: str, name: str) -> str:
    """``name`` in the folder of ``location`` (a local path or a URL)."""
    if "://" in location:
        return location.rsplit("/", 1)[0] + "/" + name
    return os.path.join(os.path.dirname(location), name)


class BaseLink:
    """The base of one delta file. ``opener(path, depth)`` opens a lazystore
    file as a view whose own bases are ``depth`` links down the chain."""

    def __init__(self, ref: BaseRef, location: str, depth: int, opener):
        self.ref = ref
        self.location = location
        self.path = sibling(location, ref.file)
        self._depth = depth
        self._opener = opener
        self._view = None
        self._lock = threading.Lock()

    def view(self):
        """The base's view, opened and checked on the first call."""
        view = self._view
        if view is None:
            with self._lock:
                if self._view is None:
                    self._view = self._open()
                view = self._view
        return view

    def _error(self, why: str) -> BaseCheckpointError:
        return BaseCheckpointError(f"base checkpoint {self.path} (of delta checkpoint {self.location}) {why}")

    def _open(self):
        if self._depth >= MAX_CHAIN:
            raise self._error(f"is more than {MAX_CHAIN} bases down a chain")
        try:
            view = self._opener(self.path, self._depth + 1)
        except FileNotFoundError:
            raise self._error("is missing") from None
        except FormatError as exc:
            raise self._error(f"cannot be read: {exc}") from None
        identity = view._file.index.identity
        if identity != (self.ref.index_checksum, self.ref.index_length):
            view.close()
            raise self._error("is not the file it was coded against: it was replaced or rewritten since "
                              f"(index xxh3 {identity[0]:016x}, expected {self.ref.index_checksum:016x})")
        return view

    def entry_for(self, entry: Entry) -> Entry:
        """The base's tensor that ``entry`` is a delta of: same name, dtype,
        shape and chunk grid (rule B2)."""
        view = self.view()
        try:
            found = view._entry(entry.name)
        except TensorNotFoundError:
            raise self._error(f"has no tensor {entry.name!r}") from None
        if (found.dtype, found.shape, found.grid) != (entry.dtype, entry.shape, entry.grid):
            raise self._error(f"holds tensor {entry.name!r} as {found.dtype} {found.shape} in chunks of "
                              f"{found.grid.extent} along axis {found.grid.axis}, not as the delta's "
                              f"{entry.dtype} {entry.shape} in chunks of {entry.grid.extent} along axis "
                              f"{entry.grid.axis}")
        return found

    def fill(self, entry: Entry, chunk_ids, out, places) -> None:
        """The base's decoded bytes of ``entry``'s chunks into ``out`` at ``places``."""
        base = self.entry_for(entry)
        file = self.view()._file
        file.reader.fill(base, chunk_ids, out, file.verify, places)

    def failing(self, entries: list[Entry]) -> set[str]:
        """Names of the tensors whose base tensors fail verification (the
        base's own chain included)."""
        for entry in entries:
            self.entry_for(entry)
        return set(self.view().verify([e.name for e in entries]))

    def close(self) -> None:
        with self._lock:
            if self._view is not None:
                self._view.close()
                self._view = None
