"""Where a Writer's bytes go, and how they appear at the target all at once.

A sink takes the checkpoint's bytes in order (``write``), then either
publishes them whole at the target (``commit``) or throws them away
(``abort``, also run if the sink is dropped unfinished). Either way, a
reader of the target sees the previous checkpoint or the new one, never a
mix or a part:

- :class:`LocalSink`: a locked partial file beside the target (see
  :mod:`lazystore.partials`), fsync'd, renamed over the target, and the
  folder fsync'd.
- :class:`UploadSink`: an object store's upload (s3://, gs://, az://). The
  object appears only when the upload completes on close (for S3, a
  multipart upload); abort cancels it. Bytes are handed over one block at
  a time, so memory stays bounded whatever the tensor sizes.
- :class:`RenameSink`: memory:// (for tests): a hidden temporary object
  moved over the target when complete.

HTTP(S) is read-only, and other fsspec filesystems offer no such guarantee:
:func:`open_sink` refuses both.
"""

from __future__ import annotations

import os
import threading
import uuid
import warnings
import weakref
from pathlib import Path

from lazystore import partials
from lazystore.errors import InvalidInputError
from lazystore.sources import local_path

# Part size of S3 multipart uploads: parts are 32-64 MiB, so the upload holds
# at most ~100 MiB and, with S3's 10,000 parts, objects reach 312 GiB. The
# storage option default_block_size overrides it.
S3_BLOCK_SIZE = 32 << 20
# Pieces handed to an upload when it does not say its block size.
WRITE_PIECE = 8 << 20

UPLOAD_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"}
READ_ONLY_PROTOCOLS = {"http", "https"}


def open_sink(path, storage_options=None):
    """The sink for a local path or ``file://`` URL, or an object-store URL."""
    local = local_path(path)
    if local is not None:
        return LocalSink(Path(local))
    from lazystore.sources.fsspec import url_to_fs

    options = dict(storage_options or {})
    fs, inner = url_to_fs(path, options)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & READ_ONLY_PROTOCOLS:
        raise InvalidInputError(
            f"cannot save to {path}: HTTP(S) URLs are read-only. Save to object storage "
            "(s3://, gs://, az://) or a local path, and serve that file over HTTP to read it from there")
    if protocols & UPLOAD_PROTOCOLS:
        block = S3_BLOCK_SIZE if protocols & {"s3", "s3a"} and "default_block_size" not in options else None
        return UploadSink(fs, inner, path, block)
    if "memory" in protocols:
        return RenameSink(fs, inner, path)
    raise InvalidInputError(
        f"cannot save to {path}: lazystore saves only where a checkpoint appears whole or not at all "
        f"(local paths, s3://, gs://, az://, memory://), and {'/'.join(sorted(protocols))} is not one of them")


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


class UploadSink:
    """An object store's upload: the object appears only when it completes."""

    def __init__(self, fs, path: str, url: str, block_size: int | None):
        self.name = url
        self._file = fs.open(path, "wb", **({"block_size": block_size} if block_size else {}))
        self._piece = int(getattr(self._file, "blocksize", 0) or WRITE_PIECE)
        self._done = False
        # Dropped unfinished: cancel, or the file's own __del__ would complete it.
        self._finalizer = weakref.finalize(self, _cancel_upload, self._file, url)

    @property
    def closed(self) -> bool:
        return self._done

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        # One block at a time: the upload buffers less than two blocks.
        for start in range(0, len(view), self._piece):
            self._file.write(view[start : start + self._piece])
        return len(view)

    def flush(self) -> None:
        pass  # parts go out as blocks fill; nothing is visible before commit anyway

    def commit(self) -> None:
        """Complete the upload: the object appears, whole."""
        self._done = True
        self._file.close()
        self._finalizer.detach()

    def abort(self) -> None:
        self._done = True
        self._finalizer()


class RenameSink:
    """A hidden temporary object, moved over the target when complete."""

    def __init__(self, fs, path: str, url: str):
        self.name = url
        self._fs = fs
        self._path = path
        head, _, tail = path.rpartition("/")
        self._tmp = f"{head}/.{tail}.{uuid.uuid4().hex[:12]}{partials.PARTIAL_SUFFIX}"
        self._file = fs.open(self._tmp, "wb")
        self._done = False
        self._finalizer = weakref.finalize(self, _remove, fs, self._file, self._tmp)

    @property
    def closed(self) -> bool:
        return self._done

    def write(self, data) -> int:
        return self._file.write(memoryview(data).cast("B"))

    def flush(self) -> None:
        pass

    def commit(self) -> None:
        self._done = True
        self._file.close()
        self._fs.mv(self._tmp, self._path)
        self._finalizer.detach()

    def abort(self) -> None:
        self._done = True
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


def _cancel_upload(file, url: str) -> None:
    try:
        file.discard()  # s3fs: abort the multipart upload; gcsfs: cancel the resumable one
    except Exception as exc:  # noqa: BLE001 - never hide the error that made us abort
        warnings.warn(f"could not cancel the unfinished upload to {url} ({exc!r}); nothing was "
                      "published, but the store may keep its parts until they expire", stacklevel=2)
    finally:
        try:
            file.closed = True  # so closing (or collecting) the file never completes the upload
        except AttributeError:
            pass


def _remove(fs, file, tmp: str) -> None:
    try:
        file.close()
    finally:
        try:
            fs.rm(tmp)
        except FileNotFoundError:
            pass


def fsync_dir(folder: Path) -> None:
    """Make the rename durable: fsync the folder that holds the new entry."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
