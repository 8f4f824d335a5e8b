"""A small HTTP server on loopback that honours Range and counts what it serves.

For lazystore's tests and benchmarks of remote reading: it serves byte
strings (or anything bytes-like, such as an mmap of a big file) at ``http://127.0.0.1:<ephemeral port>/<name>``,
answers ``Range: bytes=a-b`` with 206 Partial Content, and records every
request (method, range asked, status, body bytes sent), so a test can assert
exactly what a reader fetched. It can also misbehave on demand, the way real
servers and networks do: break off mid-body, send a short body, stall, or
ignore Range. Standard library only; it listens on 127.0.0.1 alone.

>>> with RangeServer({"ck.lzy": data}) as server:          # doctest: +SKIP
...     ck = lazystore.open(server.url("ck.lzy"))
...     server.gets, server.bytes_served
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What the next GET requests do instead of answering properly, one each:
FAULTS = (
    "cut",  # send the headers and half the body, then close the connection
    "short",  # a well-formed answer of half the bytes asked for
    "stall",  # send the headers and half the body, then go silent (up to stall_seconds)
    "whole",  # ignore Range: 200 with the whole object
    "error",  # 503 Service Unavailable
)
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


@dataclass
class Request:
    method: str
    path: str
    start: int | None  # the range asked for, [start, stop); None without Range
    stop: int | None
    status: int = 0
    sent: int = 0  # body bytes written
    fault: str | None = None


class RangeServer:
    """Serve ``files`` (name -> bytes-like) on 127.0.0.1; use as a context manager."""

    PIECE = 1 << 20  # bodies are written a piece at a time, never copied whole

    def __init__(self, files: dict | None = None, *, delay: float = 0.0, stall_seconds: float = 5.0):
        self.files = dict(files or {})
        self.requests: list[Request] = []
        self.faults: list[str] = []  # consumed by GET requests, first to last
        self.delay = delay  # seconds every GET waits before answering
        self.stall_seconds = stall_seconds
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> "RangeServer":
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True,
                                        name="rangeserver")  # a short poll: stop() returns at once
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def __enter__(self) -> "RangeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what tests use ----------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def clear(self) -> None:
        """Forget the requests recorded so far."""
        with self._lock:
            self.requests.clear()
            self.max_in_flight = self.in_flight

    @property
    def gets(self) -> list[Request]:
        return [r for r in self.requests if r.method == "GET"]

    @property
    def bytes_served(self) -> int:
        """Body bytes sent by every GET so far."""
        return sum(r.sent for r in self.gets)

    def _record(self, request: Request) -> str | None:
        with self._lock:
            self.requests.append(request)
            if request.method == "GET" and self.faults:
                request.fault = self.faults.pop(0)
            return request.fault


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: RangeServer

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hung up is part of the tests, not news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        owner = self.server.owner
        data = owner.files.get(self.path.lstrip("/"))
        req = Request("HEAD", self.path, None, None)
        owner._record(req)
        if data is None:
            return self._empty(404, req)
        req.status = 200
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:
        owner = self.server.owner
        with owner._lock:
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            self._get(owner)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with owner._lock:
                owner.in_flight -= 1

    def _get(self, owner: RangeServer) -> None:
        data = owner.files.get(self.path.lstrip("/"))
        size = len(data) if data is not None else 0
        start, stop = _parse_range(self.headers.get("Range"), size)
        req = Request("GET", self.path, start, stop)
        fault = owner._record(req)
        if owner.delay:
            owner._stopping.wait(owner.delay)
        if data is None:
            return self._empty(404, req)
        if fault == "error":
            return self._empty(503, req)
        if start is None or fault == "whole":
            status, body = 200, memoryview(data)
        elif start >= size or stop <= start:
            return self._empty(416, req)
        else:
            status, body = 206, memoryview(data)[start:stop]
        half = body[: len(body) // 2]
        req.status = status
        self.send_response(status)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(half) if fault == "short" else len(body)))
        self.end_headers()
        if fault in ("cut", "stall", "short"):
            self._send(half, req)
            self.wfile.flush()
            if fault == "stall":
                owner._stopping.wait(owner.stall_seconds)
            if fault != "short":
                self.close_connection = True
            return
        self._send(body, req)

    def _send(self, body: memoryview, req: Request) -> None:
        piece = RangeServer.PIECE
        for start in range(0, len(body), piece):
            self.wfile.write(body[start : start + piece])
            req.sent += len(body[start : start + piece])

    def _empty(self, status: int, req: Request) -> None:
        req.status = status
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


def _parse_range(header: str | None, size: int) -> tuple[int | None, int | None]:
    """``Range: bytes=a-b`` (inclusive) as [start, stop); (None, None) if absent."""
    if not header:
        return None, None
    m = _RANGE.match(header.strip())
    if not m or not (m[1] or m[2]):
        return None, None
    if not m[1]:  # a suffix: the last n bytes
        return max(0, size - int(m[2])), size
    start = int(m[1])
    stop = min(size, int(m[2]) + 1) if m[2] else size
    return start, stop


__all__ = ["FAULTS", "RangeServer", "Request"]
