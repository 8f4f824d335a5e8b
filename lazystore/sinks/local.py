"""Local files: a locked partial file beside the target (see
:mod:`lazystore.sinks.partials`), fsync'd, renamed over the target, and the
folder fsync'd. The target is the file the path names through any symlinks,
and never a folder, device, FIFO or socket (see
:mod:`lazystore.sinks.targets`).

Bytes reach the file descriptor in writes that start and end on a
multiple of ``WRITE_ALIGN`` (only the file's last write ends anywhere): the
stretch of a write that covers whole aligned blocks goes straight from the
caller's buffers (one ``os.writev`` for a window of chunks, no copy); the
bytes before the next boundary and after the last (padding, small tensors,
a tensor's ragged ends) are gathered in a buffer of our own first.

Why aligned and large: Linux (6.x, ext4 and xfs) fills the page cache in
folios sized by each write and aligned to its offset, and a mapped read
faults in a whole folio at a time. Written as 1 MiB chunks behind the
64-byte preamble, a file is left in small folios, and reading every page of
its mapping costs several times what it costs after large aligned writes
(the figures: docs/benchmarks.md, "Figures behind the code").

A buffered file object would flush on close, so throwing a failed save away
on a full disk would fail again, and the partial file, filling the disk,
would stay; here abort removes the name first and drops the buffer
unwritten.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

from lazystore.sinks import partials, targets
from lazystore.sinks.base import Sink, byte_view, split_views

# Writes start and end on multiples of this (the largest page-cache folio on
# x86-64 and arm64 with 4 KiB pages); see the module docstring.
WRITE_ALIGN = 2 << 20
# The most buffers one os.writev takes (POSIX guarantees 16; Linux takes 1024).
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 16


class LocalSink(Sink):
    """A partial file beside the target, renamed over it when complete.
    ``path`` is the caller's (a symlink stays one); the file replaced is the
    one it names."""

    def __init__(self, path: Path):
        self.path = path
        self.name = str(path)
        # What the rename replaces: a symlink's target (the link stays); a
        # device or FIFO is refused here, before anything is created.
        self._target = targets.resolve(path)
        # Partial files of writers that died in that folder go first; ours is
        # locked for as long as we write, so no other save removes it.
        partials.remove_stale(self._target.parent)
        tmp, fd = partials.create(self._target)
        self._partial = _Partial(tmp, fd)
        self._buffer = bytearray()
        # A sink dropped unfinished must not leave its temporary behind.
        self._finalizer = weakref.finalize(self, self._partial.discard)

    @property
    def closed(self) -> bool:
        return self._partial.fd < 0

    def write(self, data) -> int:
        return self.write_many((data,))[0]

    def write_many(self, blobs) -> list[int]:
        views = [byte_view(b) for b in blobs]
        lengths = [len(v) for v in views]
        views = [v for v in views if v]  # an unchanged delta chunk is stored as nothing
        if self._buffer:
            # Complete the buffered block first: the file then ends on a boundary.
            fill, views = split_views(views, WRITE_ALIGN - len(self._buffer))
            for view in fill:
                self._buffer += view
            if len(self._buffer) == WRITE_ALIGN:
                self._drain()
        # Whole blocks straight from the caller's buffers, the rest buffered.
        whole = sum(map(len, views)) // WRITE_ALIGN * WRITE_ALIGN
        direct, rest = split_views(views, whole)
        for start in range(0, len(direct), IOV_MAX):
            self._partial.write(direct[start : start + IOV_MAX])
        for view in rest:
            self._buffer += view
        return lengths

    def rewrite_head(self, data) -> None:
        """Overwrite the file's first ``len(data)`` bytes, already written (the
        writer's preamble, once it knows the file's format version). The
        partial file is not yet synced or renamed, so this is as safe as any
        other write."""
        self._drain()
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self._partial.fd, view[done:], done)

    def commit(self) -> None:
        """fsync the partial file, rename it over the target, fsync the folder."""
        self._drain()
        self._partial.sync()
        # Swapped for a device or FIFO while we wrote? Then it stays, and so
        # does the partial file until the caller aborts.
        targets.check_replaceable(self._target)
        # Renamed while still open, so still locked: a clean-up never takes
        # a finished partial file for a dead writer's.
        os.replace(self._partial.path, self._target)
        self._finalizer.detach()
        self._partial.close()
        fsync_dir(self._target.parent)

    def abort(self) -> None:
        """Remove the partial file; never raises, so the error that made the
        caller abort is the one it sees."""
        self._finalizer()

    def _drain(self) -> None:
        if self._buffer:
            self._partial.write([memoryview(self._buffer)])
            self._buffer = bytearray()


class _Partial:
    """The partial file: its name, its descriptor, and the background flush
    that starts writing its pages to disk early."""

    # Start writing dirty pages to disk every this many bytes while the
    # writer is still producing them, so the final fsync has only the tail
    # left: a durable save costs about max(write, disk), not write + disk.
    FLUSH_EVERY = 64 << 20

    def __init__(self, path: Path, fd: int):
        self.path = path
        self.fd = fd
        self._unflushed = 0
        self._flusher: threading.Thread | None = None
        self._flush_error: OSError | None = None

    def write(self, views: list[memoryview]) -> None:
        """Write all of ``views``, in order, looping over short writes: one
        os.write for one buffer, one os.writev (as one large write to the
        page cache) for several."""
        total = sum(map(len, views))
        while views:
            n = os.write(self.fd, views[0]) if len(views) == 1 else os.writev(self.fd, views)
            _, views = split_views(views, n)
        self._unflushed += total
        if self._unflushed >= self.FLUSH_EVERY and not (self._flusher and self._flusher.is_alive()):
            self._unflushed = 0
            self._flusher = threading.Thread(target=self._flush, daemon=True, name="lazystore-flush")
            self._flusher.start()

    def _flush(self) -> None:
        try:
            os.fdatasync(self.fd)
        except OSError as exc:
            # Kept, not dropped: Linux reports a write-back error to one
            # fsync per descriptor, so the final fsync might not see it again.
            self._flush_error = exc

    def _join_flusher(self) -> None:
        # Never close the descriptor under a running fdatasync.
        if self._flusher is not None:
            self._flusher.join()

    def sync(self) -> None:
        """Make the file's bytes durable; raises what failed."""
        self._join_flusher()
        if self._flush_error is not None:
            raise self._flush_error
        os.fsync(self.fd)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        os.close(fd)

    def discard(self) -> None:
        """Remove the file, then close it (a failing close cannot keep the
        name alive); never raises."""
        self._join_flusher()
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                os.close(fd)
            except OSError:
                pass


def fsync_dir(folder: Path) -> None:
    """Make the rename durable: fsync the folder that holds the new entry."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
