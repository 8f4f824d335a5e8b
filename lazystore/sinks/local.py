"""Local files: a locked partial file beside the target (see
:mod:`lazystore.sinks.partials`), fsync'd, renamed over the target, and the
folder fsync'd."""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

from lazystore.sinks import partials


class LocalSink:
    """A partial file beside the target, renamed over it when complete."""

    def __init__(self, path: Path):
        self.path = path
        self.name = str(path)
        # Partial files of writers that died in this folder go first; ours is
        # locked for as long as we write, so no other save removes it.
        partials.remove_stale(path.parent)
        self._tmp, self._file = partials.create(path)
        self._flusher = _BackgroundFlush(self._file.fileno())
        # A sink dropped unfinished must not leave its temporary behind.
        self._finalizer = weakref.finalize(self, _discard, self._file, self._flusher, self._tmp)

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, data) -> int:
        n = self._file.write(data)
        self._flusher.wrote(n)
        return n

    def flush(self) -> None:
        self._file.flush()

    def commit(self) -> None:
        """fsync the partial file, rename it over the target, fsync the folder."""
        self._file.flush()
        self._flusher.finish()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.path)
        self._finalizer.detach()
        fsync_dir(self.path.parent)

    def abort(self) -> None:
        self._finalizer()


class _BackgroundFlush:
    """Start writing dirty pages to disk while the writer is still producing
    them, so the final fsync has only the tail left: a durable save then
    costs about max(write, disk) rather than write + disk."""

    EVERY = 64 << 20

    def __init__(self, fd: int):
        self._fd = fd
        self._pending = 0
        self._thread: threading.Thread | None = None

    def wrote(self, n: int) -> None:
        self._pending += n
        if self._pending >= self.EVERY and not (self._thread and self._thread.is_alive()):
            self._pending = 0
            self._thread = threading.Thread(target=self._sync, daemon=True, name="lazystore-flush")
            self._thread.start()

    def _sync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError:
            pass  # the final fsync in commit() reports real errors

    def finish(self) -> None:
        if self._thread is not None:
            self._thread.join()


def _discard(file, flusher: _BackgroundFlush, tmp: Path) -> None:
    flusher.finish()  # never close the file under a running fdatasync
    file.close()
    tmp.unlink(missing_ok=True)


def fsync_dir(folder: Path) -> None:
    """Make the rename durable: fsync the folder that holds the new entry."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
