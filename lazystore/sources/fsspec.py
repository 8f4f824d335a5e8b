"""Checkpoints in remote storage (S3, GCS, HTTP(S), ...) through fsspec.

Every read is a range request (``fs.cat_file(path, start, end)``), so only
the bytes asked for travel. Each answer must be exactly the range asked for;
over HTTP that is judged at its headers (lazystore.sources.http_ranges), so
a whole object sent for a range is cut off, not downloaded. A request that
fails in a way that may pass (a 5xx, 408, 425 or 429 status, a broken or
refused connection, a timeout, a body cut short, of the wrong length or
range) is asked again, up to ATTEMPTS times in all with a short backoff (or
the server's Retry-After); a failure that will not pass (any other 4xx) is
not retried, and a server that ignores Range (sends the whole object)
raises RangeNotSupportedError at once. What finally fails raises
:class:`RemoteError`, naming the URL, the byte range, the attempts and the
cause; a partial answer is never used as data. Only a missing object at
open raises FileNotFoundError.
``read_many`` merges nearby ranges and fetches the merged ranges
concurrently.

fsspec (and s3fs, aiohttp) are an optional extra, imported only here.
"""

from __future__ import annotations

import asyncio
import email.utils
import errno
import importlib
import time

from lazystore._core.distribution import install_hint
from lazystore.errors import InvalidInputError, MissingDependencyError, RangeNotSupportedError, RemoteError
from lazystore.sources import http_ranges
from lazystore.sources.base import ByteSource
from lazystore.sources.ranges import WrongAnswer, coalesce, wrong_length

EXTRA = install_hint("remote", "fsspec s3fs aiohttp")

# Ranges at most this far apart are fetched as one request (the gap is read
# and dropped): it covers the alignment padding between neighbouring tensors.
MAX_GAP = 64 << 10
# No merged request grows past this, so a big read is several concurrent
# ones (8-16 MiB is the range size object stores suggest).
MAX_REQUEST = 8 << 20
# Requests in flight at once, for filesystems that run them concurrently.
CONCURRENCY = 16
# Every request is tried at most this many times (the first and two retries).
ATTEMPTS = 3
# Seconds before the first retry, doubled before each next one ...
BACKOFF = 0.05
# ... unless the server's Retry-After asks for longer, honoured up to this.
MAX_RETRY_AFTER = 5.0
# What the store's info() says that tells one version of an object from
# another (HTTP and S3 ETags, S3 versions, GCS generations, modification times).
IDENTITY = ("ETag", "etag", "VersionId", "generation", "Last-Modified", "LastModified", "mtime")


def import_fsspec():
    """fsspec, or a MissingDependencyError naming the extra."""
    try:
        return importlib.import_module("fsspec")
    except ImportError as exc:
        raise MissingDependencyError(
            f"reading or writing URLs needs fsspec: {EXTRA}"
        ) from exc


def url_to_fs(url: str, storage_options=None):
    """The fsspec filesystem and the path inside it for ``url``."""
    fsspec = import_fsspec()
    try:
        return fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    except ImportError as exc:  # the filesystem's own package (s3fs, gcsfs, aiohttp, ...)
        raise MissingDependencyError(
            f"{url}: {exc}. The remote extra brings fsspec, s3fs (s3://) and aiohttp (http(s)://): {EXTRA}; "
            "other stores need their own fsspec package (gcsfs for gs://, adlfs for az://)") from exc
    except ValueError as exc:  # e.g. an unknown protocol
        raise InvalidInputError(f"{url}: {exc}") from exc


class FsspecSource(ByteSource):
    """An object in remote storage, read with range requests."""

    def __init__(self, url: str, storage_options=None):
        self.name = url
        self._fs, self._path = url_to_fs(url, storage_options)
        self._options = http_ranges.request_options(self._fs)  # for every range request
        self._closed = False
        self._opened = self._stat()  # what the object was when opened: see check_unchanged
        self._changed: tuple | None = None  # (errno, message) once it is known to have changed
        self.size = self._opened["size"]

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

    def check_unchanged(self) -> None:
        """Raise RemoteError if the object is no longer the one opened: gone,
        or with another size or identity (ETag, version, modification time,
        as far as the store tells). Called when bytes fail their checksums
        twice, to tell a replaced object from a damaged one. Once it has
        changed, that is remembered: asking again costs no request."""
        if self._changed is None:
            try:
                now = self._stat()
            except FileNotFoundError:
                self._changed = (errno.ENOENT, f"{self.name}: the object is gone since it was opened")
            except RemoteError:
                return  # cannot tell: the caller's error stands
            else:
                changed = [f"{key} {self._opened[key]!r} -> {now[key]!r}"
                           for key in self._opened if key in now and now[key] != self._opened[key]]
                if not changed:
                    return
                message = (f"{self.name} changed since it was opened ({', '.join(changed)}): "
                           "its bytes no longer match the index read then; open it again")
                self._changed = (None, message)
        code, message = self._changed
        raise RemoteError(code, message) if code is not None else RemoteError(message)

    # -- requests ---------------------------------------------------------------

    def _stat(self) -> dict:
        """The object's size and what identifies its version (see IDENTITY)."""
        # A listing cached by an earlier call may predate the object's latest
        # version: ask the store itself.
        self._fs.invalidate_cache(self._path)
        info = self._attempt(lambda: self._fs.info(self._path), "asking for its size")
        if info.get("size") is None:
            raise RemoteError(f"{self.name}: the server does not say how big the object is "
                              "(no Content-Length), so its index cannot be found")
        return {"size": int(info["size"]), **{k: info[k] for k in IDENTITY if info.get(k) is not None}}

    def _attempt(self, call, what: str):
        """``call()``, retried (up to ATTEMPTS in all) on failures that may pass.
        An object that is not there raises FileNotFoundError; anything else
        that fails raises RemoteError."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return call()
            except _CAUGHT as exc:
                cause = _cause(exc)
                if _not_found(cause) and isinstance(exc, FileNotFoundError):
                    raise  # no such object: as a local path would say
                if not _transient(cause) or attempt == ATTEMPTS:
                    raise _error(f"{self.name}: {what} failed", cause, attempt) from cause
                _pause(attempt, [cause])

    def _fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Each range's bytes, one request per range, concurrently where the
        filesystem allows. A range that fails in a way that may pass, or comes
        back with the wrong length, is requested again, up to ATTEMPTS times
        in all; then, or at once for a failure that will not pass (a 4xx
        status), RemoteError is raised. Nothing of a failed answer is used."""
        results: list = [None] * len(ranges)
        todo, attempt = list(range(len(ranges))), 0
        while todo:
            attempt += 1
            failures = []
            for i, result in zip(todo, self._request([ranges[i] for i in todo])):
                a, b = ranges[i]
                if not isinstance(result, BaseException) and len(result) == b - a:
                    results[i] = result
                    continue
                failure = _cause(result) if isinstance(result, BaseException) else wrong_length(len(result), a, b,
                                                                                                 self.size)
                if not _transient(failure) or attempt == ATTEMPTS:
                    self._give_up(a, b, failure, attempt)
                failures.append((i, failure))
            todo = [i for i, _ in failures]
            if failures:
                _pause(attempt, [f for _, f in failures])
        return results

    def _give_up(self, a: int, b: int, failure: BaseException, attempts: int):
        """Raise the RemoteError of reading bytes a-b; if the object changed
        since it was opened (which a 404, 416 or a short body can mean), say that."""
        if isinstance(failure, WrongAnswer) and failure.range_ignored:
            raise RangeNotSupportedError(
                f"{self.name}: the server ignores HTTP Range requests: {failure}. lazystore reads "
                "checkpoints in byte ranges, so it stopped that transfer and does not ask again. Serve the "
                "file with a server that honours Range: nginx, Caddy, an object store, or "
                "`python -m lazystore.testing.rangeserver FOLDER` (see docs/remote.md)") from None
        error = _error(f"{self.name}: reading bytes {a}-{b} (nothing of them used) failed", failure, attempts)
        if isinstance(failure, WrongAnswer) or _not_found(failure) or _status(failure) in (412, 416):
            try:
                self.check_unchanged()
            except RemoteError as changed:
                raise changed from error
        raise error from (None if isinstance(failure, WrongAnswer) else failure)

    def _request(self, ranges: list[tuple[int, int]]) -> list:
        """One attempt: each range's bytes, or the exception it raised."""
        fs, path = self._fs, self._path
        if len(ranges) == 1:
            (a, b), = ranges
            try:
                return [fs.cat_file(path, start=a, end=b, **self._options)]
            except _CAUGHT as exc:
                return [exc]
        starts, ends = [a for a, _ in ranges], [b for _, b in ranges]
        kwargs = {"batch_size": CONCURRENCY, **self._options} if getattr(fs, "async_impl", False) else {}
        try:
            results = fs.cat_ranges([path] * len(ranges), starts, ends, on_error="return", **kwargs)
        except _CAUGHT as exc:  # one failure may take the whole batch down
            return [exc] * len(ranges)
        return list(results)


# aiohttp, botocore, fsspec ... each have their own exceptions, and asyncio's
# CancelledError is no Exception: all are failures of a request here.
_CAUGHT = (Exception, asyncio.CancelledError)
# Statuses worth asking again: timeouts, throttling and every 5xx.
_TRANSIENT_4XX = {408, 425, 429}
# errno for the statuses that have one (looked up with _status(), None for a failure without one)
_STATUS_ERRNO: dict[int | None, int] = {401: errno.EACCES, 403: errno.EACCES}


def _cause(exc: BaseException) -> BaseException:
    """The real failure behind ``exc``: fsspec's HTTP filesystem reports any
    failure to learn an object's size (a refused connection, a 503, ...) as
    FileNotFoundError, and s3fs turns botocore's errors into OSErrors, each
    with the original as ``__cause__``."""
    if isinstance(exc, (FileNotFoundError, PermissionError)) and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a failed request: aiohttp's ``status``, botocore's response."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return None


def _not_found(exc: BaseException) -> bool:
    status = _status(exc)
    return status in (404, 410) if status is not None else isinstance(exc, FileNotFoundError)


def _transient(exc: BaseException) -> bool:
    """May asking again mend it? 5xx, 408, 425 and 429 may; other statuses
    (a refusal, a missing object, a range past the end) will not, nor will a
    missing file or permission. Broken connections, timeouts, answers of the
    wrong length and failures not known to be permanent are retried; a server
    that ignores Range is not."""
    if isinstance(exc, WrongAnswer):
        return not exc.range_ignored
    status = _status(exc)
    if status is not None:
        return status >= 500 or status in _TRANSIENT_4XX
    return not isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError))


def _error(what: str, failure: BaseException, attempts: int) -> RemoteError:
    """The RemoteError of a request that failed with ``failure``."""
    tries = f"after {attempts} attempts" if attempts > 1 else "(not retried)"
    return remote_error(f"{what} {tries}", failure)


def remote_error(what: str, failure: BaseException) -> RemoteError:
    """RemoteError("<what>: <the failure>"), with the failure's errno (or the
    one its HTTP status implies) when it has one. Raise it ``from failure``."""
    failure = _cause(failure)
    code = getattr(failure, "errno", None)
    if not isinstance(code, int):
        code = errno.ENOENT if _not_found(failure) else _STATUS_ERRNO.get(_status(failure))
    message = f"{what}: {_describe(failure)}"
    return RemoteError(code, message) if code is not None else RemoteError(message)


def _pause(attempt: int, failures: list) -> None:
    """Wait before the next attempt: BACKOFF, doubled each time, or as long as
    a server's Retry-After asks (up to MAX_RETRY_AFTER seconds)."""
    delay = BACKOFF * 2 ** (attempt - 1)
    for failure in failures:
        asked = _retry_after(failure)
        if asked is not None:
            delay = max(delay, min(asked, MAX_RETRY_AFTER))
    time.sleep(delay)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds asked by a Retry-After header (seconds or an HTTP date), if any."""
    headers = getattr(exc, "headers", None)
    response = getattr(exc, "response", None)
    if headers is None and isinstance(response, dict):
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders")
    value = None
    if headers is not None:
        value = headers.get("Retry-After") or headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, WrongAnswer):
        return text  # lazystore's own verdict: its class name means nothing to a user
    name = type(exc).__name__
    if isinstance(exc, FileNotFoundError) and _status(exc) is None:
        name += " (no such object)"  # fsspec's HTTP filesystem says no more of a 404
    return f"{name}: {text}" if text else name


__all__ = ["FsspecSource", "import_fsspec", "remote_error", "url_to_fs"]
