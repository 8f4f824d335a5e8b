"""Object stores and memory://: sinks over fsspec filesystems.

- :class:`UploadSink`: an object store's upload (s3://, gs://, az://). The
  object appears only when the upload completes on commit (for S3, a
  multipart upload); abort cancels it. Bytes are handed over one block at
  a time, so memory stays bounded whatever the tensor sizes.
- :class:`RenameSink`: memory:// (for tests): a hidden temporary object
  moved over the target when complete.
"""

from __future__ import annotations

import time
import warnings
import weakref

from lazystore.errors import LazyStoreError
from lazystore.sinks import partials
from lazystore.sinks.base import Sink, byte_view

# Part size of S3 multipart uploads: parts are 32-64 MiB, so the upload holds
# at most ~100 MiB and, with S3's 10,000 parts, objects reach 312 GiB. The
# storage option default_block_size overrides it.
S3_BLOCK_SIZE = 32 << 20
# Pieces handed to an upload when it does not say its block size.
WRITE_PIECE = 8 << 20
# Cancelling an upload is tried this many times (a pause of ABORT_PAUSE
# seconds, doubled each time, in between): an upload left behind keeps its
# parts, and costs, until the store expires it.
ABORT_ATTEMPTS = 3
ABORT_PAUSE = 0.1

UPLOAD_PROTOCOLS = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss"}
READ_ONLY_PROTOCOLS = {"http", "https"}


class UploadSink(Sink):
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
        view = byte_view(data)
        # One block at a time: the upload buffers less than two blocks.
        try:
            for start in range(0, len(view), self._piece):
                self._file.write(view[start : start + self._piece])
        except LazyStoreError:
            raise
        except Exception as exc:  # s3fs, botocore, gcsfs ... each have their own
            raise _failed(self.name, "uploading a part", exc) from exc
        return len(view)

    def flush(self) -> None:
        pass  # parts go out as blocks fill; nothing is visible before commit anyway

    def commit(self) -> None:
        """Complete the upload: the object appears, whole. If that fails, the
        writer aborts, which cancels the upload."""
        self._done = True
        try:
            self._file.close()
        except LazyStoreError:
            raise
        except Exception as exc:
            raise _failed(self.name, "completing the upload", exc) from exc
        self._finalizer.detach()

    def abort(self) -> None:
        self._done = True
        self._finalizer()


class RenameSink(Sink):
    """A hidden temporary object, moved over the target when complete."""

    def __init__(self, fs, path: str, url: str):
        self.name = url
        self._fs = fs
        self._path = path
        head, _, tail = path.rpartition("/")
        self._tmp = f"{head}/{partials.partial_name(tail)}"
        self._file = fs.open(self._tmp, "wb")
        self._done = False
        self._finalizer = weakref.finalize(self, _remove, fs, self._file, self._tmp)

    @property
    def closed(self) -> bool:
        return self._done

    def write(self, data) -> int:
        return self._file.write(byte_view(data))

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


def _failed(url: str, what: str, exc: BaseException) -> Exception:
    # Imported here: it brings asyncio, which no local save should pay for.
    from lazystore.sources.fsspec import remote_error

    return remote_error(f"saving to {url}: {what} failed, so nothing is published", exc)


def _cancel_upload(file, url: str) -> None:
    try:
        for attempt in range(1, ABORT_ATTEMPTS + 1):
            try:
                file.discard()  # s3fs: abort the multipart upload; gcsfs: cancel the resumable one
                return
            except Exception as exc:  # noqa: BLE001 - never hide the error that made us abort
                if attempt == ABORT_ATTEMPTS:
                    warnings.warn(f"could not cancel the unfinished upload to {url} in {attempt} attempts "
                                  f"({exc!r}); nothing was published, but the store may keep its parts "
                                  "until they expire", stacklevel=2)
                else:
                    time.sleep(ABORT_PAUSE * 2 ** (attempt - 1))
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
