"""Checkpoints in remote storage (S3, GCS, HTTP(S), ...) through fsspec.

Every read is a range request (``fs.cat_file(path, start, end)``), so only
the bytes asked for travel. Each answer must be exactly as long as asked:
a request that fails, breaks off, times out or comes back short is retried
once, and a second failure raises :class:`RemoteError`; a partial answer is
never used as data. ``read_many`` merges nearby ranges and fetches the
merged ranges concurrently.

fsspec (and s3fs, aiohttp) are an optional extra, imported only here.
"""

from __future__ import annotations

import importlib

from lazystore.errors import InvalidInputError, MissingDependencyError, RemoteError
from lazystore.sources.base import ByteSource
from lazystore.sources.ranges import coalesce

EXTRA = "pip install 'lazystore[remote]'"

# Ranges at most this far apart are fetched as one request (the gap is read
# and dropped): it covers the alignment padding between neighbouring tensors.
MAX_GAP = 64 << 10
# No merged request grows past this, so a big read is several concurrent
# ones (8-16 MiB is the range size object stores suggest).
MAX_REQUEST = 8 << 20
# Requests in flight at once, for filesystems that run them concurrently.
CONCURRENCY = 16


def import_fsspec():
    """fsspec, or a MissingDependencyError naming the extra."""
    try:
        return importlib.import_module("fsspec")
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading or writing URLs needs fsspec: {EXTRA} (fsspec, s3fs, aiohttp)"
        ) from exc


def url_to_fs(url: str, storage_options=None):
    """The fsspec filesystem and the path inside it for ``url``."""
    fsspec = import_fsspec()
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:  # the filesystem's own package (s3fs, gcsfs, aiohttp, ...)
        raise MissingDependencyError(
            f"{url}: {exc}. {EXTRA} brings fsspec, s3fs (s3://) and aiohttp (http(s)://); "
            "other stores need their own fsspec package (gcsfs for gs://, adlfs for az://)") from exc
    except ValueError as exc:  # e.g. an unknown protocol
        raise InvalidInputError(f"{url}: {exc}") from exc


class FsspecSource(ByteSource):
    """An object in remote storage, read with range requests."""

    def __init__(self, url: str, storage_options=None):
        self.name = url
        self._fs, self._path = url_to_fs(url, storage_options)
        self._closed = False
        self.size = self._size()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        # The filesystem is fsspec's cached instance, shared: not ours to close.
        self._closed = True

    def read(self, start: int, stop: int) -> memoryview:
        self._check_range(start, stop)
        if start == stop:
            return memoryview(b"")
        return memoryview(self._fetch([(start, stop)])[0])

    def read_into(self, offset: int, out) -> None:
        out = memoryview(out).cast("B")
        self._check_range(offset, offset + len(out))
        if len(out):
            out[:] = self._fetch([(offset, offset + len(out))])[0]

    def read_many(self, ranges) -> list:
        ranges = [(int(a), int(b)) for a, b in ranges]
        for a, b in ranges:
            self._check_range(a, b)
        wanted = [i for i, (a, b) in enumerate(ranges) if a < b]
        groups = coalesce([ranges[i] for i in wanted], max_gap=MAX_GAP, max_size=MAX_REQUEST)
        blobs = self._fetch([(start, stop) for start, stop, _ in groups])
        out: list = [memoryview(b"")] * len(ranges)
        for (start, _, members), blob in zip(groups, blobs):
            view = memoryview(blob)
            for m in members:
                a, b = ranges[wanted[m]]
                out[wanted[m]] = view[a - start : b - start]
        return out

    # -- requests ---------------------------------------------------------------

    def _size(self) -> int:
        # A listing cached by an earlier call may predate the object's latest
        # version: ask the store itself.
        self._fs.invalidate_cache(self._path)
        size = self._attempt(lambda: self._fs.size(self._path), "asking for its size")
        if size is None:
            raise RemoteError(f"{self.name}: the server does not say how big the object is "
                              "(no Content-Length), so its index cannot be found")
        return int(size)

    def _attempt(self, call, what: str):
        """``call()``, retried once on a failure that may pass."""
        for attempt in (1, 2):
            try:
                return call()
            except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
                cause = _network_failure(exc)
                if cause is None:
                    raise  # the object is not there: not a failure that a retry mends
                if attempt == 2:
                    raise RemoteError(f"{self.name}: {what} failed twice: {_describe(cause)}") from cause
            except Exception as exc:  # noqa: BLE001 - aiohttp, botocore, ... each have their own
                if attempt == 2:
                    raise RemoteError(f"{self.name}: {what} failed twice: {_describe(exc)}") from exc

    def _fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each range's bytes, one request per range, concurrently where the
        filesystem allows. Any range that fails or comes back with the wrong
        length is requested once more; a second failure raises RemoteError."""
        results = self._request(ranges)
        retry = [i for i, (r, (a, b)) in enumerate(zip(results, ranges)) if not _complete(r, b - a)]
        if retry:
            again = self._request([ranges[i] for i in retry])
            for i, r in zip(retry, again):
                a, b = ranges[i]
                if not _complete(r, b - a):
                    if isinstance(r, (FileNotFoundError, PermissionError)):
                        raise r
                    problem = _describe(r) if isinstance(r, BaseException) else (
                        f"{len(r)} bytes came back for a request of {b - a}")
                    raise RemoteError(
                        f"{self.name}: reading bytes {a}-{b} failed twice ({problem}); nothing was used"
                    ) from (r if isinstance(r, BaseException) else None)
                results[i] = r
        return results

    def _request(self, ranges: list[tuple[int, int]]) -> list:
        """One attempt: each range's bytes, or the exception it raised."""
        fs, path = self._fs, self._path
        if len(ranges) == 1:
            (a, b), = ranges
            try:
                return [fs.cat_file(path, start=a, end=b)]
            except Exception as exc:  # noqa: BLE001
                return [exc]
        starts, ends = [a for a, _ in ranges], [b for _, b in ranges]
        kwargs = {"batch_size": CONCURRENCY} if getattr(fs, "async_impl", False) else {}
        try:
            results = fs.cat_ranges([path] * len(ranges), starts, ends, on_error="return", **kwargs)
        except Exception as exc:  # noqa: BLE001 - one failure may take the whole batch down
            return [exc] * len(ranges)
        return list(results)


def _network_failure(exc: BaseException) -> BaseException | None:
    """The network error behind a "not found", if that is what it is.

    fsspec's HTTP filesystem reports any failure to learn an object's size
    (connection refused, timed out, ...) as FileNotFoundError, with the real
    error as its cause; a genuine 404 has an HTTP status there."""
    cause = exc.__cause__
    if isinstance(cause, OSError) and not isinstance(cause, (FileNotFoundError, PermissionError)):
        return cause
    return None


def _complete(result, length: int) -> bool:
    return not isinstance(result, BaseException) and len(result) == length


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["FsspecSource", "import_fsspec", "url_to_fs"]
