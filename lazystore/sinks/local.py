"""Local files: a locked partial file beside the target (see
:mod:`lazystore.sinks.partials`), fsync'd, renamed over the target, and the
folder fsync'd.

Bytes go to the file descriptor with ``os.write``: large writes (a raw
tensor) directly, small ones (padding, the index) gathered in a buffer of
our own first. A buffered file object would flush on close, so throwing a
failed save away on a full disk would fail again, and the partial file,
filling the disk, would stay; here abort removes the name first and drops
the buffer unwritten.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

from lazystore.sinks import partials

# Writes smaller than this are gathered into one buffer of up to
# BUFFER_BYTES before they reach the file: a save of many small tensors is
# then a few large writes, not several small ones per tensor.
SMALL_WRITE = 64 << 10
BUFFER_BYTES = 1 << 20


class LocalSink:
    """A partial file beside the target, renamed over it when complete."""

    def __init__(self, path: Path):
        self.path = path
        self.name = str(path)
        # Partial files of writers that died in this folder go first; ours is
        # locked for as long as we write, so no other save removes it.
        partials.remove_stale(path.parent)
        tmp, fd = partials.create(path)
        self._partial = _Partial(tmp, fd)
        self._buffer = bytearray()
        # A sink dropped unfinished must not leave its temporary behind.
        self._finalizer = weakref.finalize(self, self._partial.discard)

    @property
    def closed(self) -> bool:
        return self._partial.fd < 0

    def write(self, data) -> int:
        view = memoryview(data)
        if view.ndim != 1 or view.format != "B":
            view = view.cast("B")
        n = len(view)
        if n < SMALL_WRITE:
            self._buffer += view
            if len(self._buffer) >= BUFFER_BYTES:
                self._drain()
        else:
            self._drain()
            self._partial.write(view)
        return n

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
        # Renamed while still open, so still locked: a clean-up never takes
        # a finished partial file for a dead writer's.
        os.replace(self._partial.path, self.path)
        self._finalizer.detach()
        self._partial.close()
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        """Remove the partial file; never raises, so the error that made the
        caller abort is the one it sees."""
        self._finalizer()

    def _drain(self) -> None:
        if self._buffer:
            self._partial.write(memoryview(self._buffer))
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

    def write(self, view: memoryview) -> None:
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])
        self._unflushed += done
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
