"""A small HTTP server on loopback that honours Range and counts what it serves.

For lazystore's tests and benchmarks of remote reading: it serves byte
strings (or anything bytes-like, such as an mmap of a big file) at ``http://127.0.0.1:<ephemeral port>/<name>``,
answers ``Range: bytes=a-b`` with 206 Partial Content, and records every
request (method, range asked, status, body bytes sent), so a test can assert
exactly what a reader fetched. Every answer carries an ``ETag`` that
changes when the object is replaced (``server.files[name] = other``).
Standard library only; it listens on 127.0.0.1 unless told otherwise.

It also serves a folder from the command line, for anyone who needs a
server that honours Range (``python -m http.server`` does not)::

    python -m lazystore.testing.rangeserver FOLDER --port 8000 [--bind 0.0.0.0]

Files are memory-mapped and sent a piece at a time; nothing outside FOLDER
is served. No TLS, no authentication: for a trusted network.

It can also misbehave on demand, the way real servers and networks do (see
:data:`FAULTS`): answer 503 (with ``Retry-After``), break off mid-body, send
a short body, stall, ignore Range, answer another range, reset the
connection, flip a byte of the body, or have the object replaced between
two requests. Faults come from

- ``server.faults``: a list of fault kinds (or :class:`Fault`), one taken by
  each GET, first to last;
- ``server.plan``: a callable given each :class:`Request` (HEAD and GET)
  when the list is empty, answering a kind, a :class:`Fault` or None.
  :class:`Every` faults every k-th request (or the first n);
  :class:`RandomFaults` draws faults from a seed and the request itself
  (method, path, range and attempt), never from arrival order, so the same
  seed gives the same faults even when requests arrive concurrently.

>>> with RangeServer({"ck.lzy": data}, plan=Every(3, Fault("error", retry_after=1))) as server:  # doctest: +SKIP
...     ck = lazystore.open(server.url("ck.lzy"))
...     server.gets, server.bytes_served, [r.fault for r in server.requests]
"""

from __future__ import annotations

import argparse
import itertools
import mmap
import os
import re
import socket
import stat
import struct
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from lazystore.errors import ClosedError
from lazystore.testing.fault_plans import FAULTS, Every, Fault, RandomFaults, Request, request_rng

if TYPE_CHECKING:  # typing.Self is 3.11's; the package supports 3.10
    from typing_extensions import Self

# What a name serves: bytes-like, or a memory map of a file.
Served = bytes | bytearray | memoryview | mmap.mmap
# A fault plan: given each request, a fault kind, a Fault or None (Every, RandomFaults).
Plan = Callable[[Request], str | Fault | None]

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class Folder:
    """The regular files under ``root``, by their path relative to it, as ``files`` for a RangeServer.

    A file truncated in place while mapped would crash the server (SIGBUS):
    lazystore itself only ever replaces files whole, by rename.
    ``folder[name] = data`` serves ``data`` at ``name`` from then on (as a
    "swap" fault does), leaving the disk alone.

    Parameters
    ----------
    root : str or os.PathLike
        The folder served.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.path.realpath(root)
        self._maps: dict[str, tuple[tuple, Served]] = {}  # name -> (identity, map)
        self._replaced: dict[str, Served] = {}  # name -> the bytes-like served instead of the file
        self._lock = threading.Lock()

    def __setitem__(self, name: str, data: Served) -> None:
        with self._lock:
            self._replaced[name] = data

    def get(self, name: str) -> Served | None:
        """The bytes served at ``name``.

        Parameters
        ----------
        name : str
            The path relative to ``root`` (URL-quoted, as requested).

        Returns
        -------
        mmap.mmap or bytes-like or None
            A memory map of the file (the same map while the file is
            unchanged, so its ETag stays), or None for a name that is
            missing, not a regular file, or outside ``root``.
        """
        with self._lock:
            if name in self._replaced:
                return self._replaced[name]
        path = os.path.realpath(os.path.join(self.root, urllib.parse.unquote(name.partition("?")[0])))
        if os.path.commonpath([self.root, path]) != self.root:
            return None  # ".." or a link out of the folder
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the server
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                held = self._maps.get(name)
                if held is None or held[0] != identity:
                    data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size else b""
                    held = self._maps[name] = (identity, data)
                return held[1]
        finally:
            os.close(fd)


class RangeServer:
    """Serve ``files`` over HTTP, honouring Range; use as a context manager.

    ``requests`` records every request (a :class:`Request`); ``faults`` is
    a list of fault kinds (or :class:`Fault`), one taken by each GET, first
    to last; ``in_flight`` and ``max_in_flight`` count concurrent requests.

    Parameters
    ----------
    files : Mapping of str to bytes-like, or Folder, optional
        Name -> bytes-like, or a :class:`Folder`.
    delay : float, optional
        Seconds every GET waits before answering.
    stall_seconds : float, optional
        How long a "stall" fault goes silent.
    plan : callable, optional
        Given each :class:`Request` when ``faults`` is empty, it answers a
        fault kind, a :class:`Fault` or None (:class:`Every`,
        :class:`RandomFaults`).
    seed : int, optional
        Where a flipped byte falls, when its Fault does not say.
    host : str, optional
        The address to listen on (127.0.0.1).
    port : int, optional
        The port (0: any free one).
    record : bool, optional
        False keeps no list of requests (and injects no faults), for a
        server that runs for long.
    """

    PIECE = 1 << 20  # bodies are written a piece at a time, never copied whole

    def __init__(self, files: Mapping[str, Served] | Folder | None = None, *, delay: float = 0.0,
                 stall_seconds: float = 5.0, plan: Plan | None = None, seed: int = 0, host: str = "127.0.0.1",
                 port: int = 0, record: bool = True) -> None:
        self.files: dict[str, Served] | Folder = files if isinstance(files, Folder) else dict(files or {})
        self.host, self.record = host, record
        self._port = port
        self.requests: list[Request] = []
        self.faults: list[str | Fault] = []  # consumed by GET requests, first to last
        self.plan = plan  # request -> fault kind, Fault or None; asked when ``faults`` is empty
        self.seed = seed  # where a flipped byte falls, when its Fault does not say
        self.delay = delay  # seconds every GET waits before answering
        self.stall_seconds = stall_seconds
        self._attempts: dict[tuple, int] = {}
        self._etags: dict[str, tuple[object, str]] = {}  # name -> (the object, its ETag)
        self._versions = itertools.count(1)
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> Self:
        """Start listening, in a thread of its own.

        Returns
        -------
        RangeServer
            This server.
        """
        self._server = _Server((self.host, self._port), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True,
                                        name="rangeserver")  # a short poll: stop() returns at once
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and end every open connection.

        A client's pooled keep-alive connection must not go on being served
        once stopped.
        """
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            assert self._thread is not None  # start() set it along with _server
            self._thread.join()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what tests use ----------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the server listens on (raises ClosedError when it is not running)."""
        if self._server is None:
            raise ClosedError("the RangeServer is not running: start() it, or use it in a with block")
        return self._server.server_address[1]

    def url(self, name: str) -> str:
        """The URL of ``name`` on this server.

        Parameters
        ----------
        name : str
            A name of ``files``.

        Returns
        -------
        str
            ``http://127.0.0.1:<port>/<name>``.

        Raises
        ------
        ClosedError
            The server is not running.
        """
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{host}:{self.port}/{name}"

    def clear(self) -> None:
        """Forget the requests recorded so far (and start counting attempts afresh)."""
        with self._lock:
            self.requests.clear()
            self._attempts.clear()
            self.max_in_flight = self.in_flight

    @property
    def gets(self) -> list[Request]:
        """The GET requests recorded so far."""
        return [r for r in self.requests if r.method == "GET"]

    @property
    def bytes_served(self) -> int:
        """Body bytes sent by every GET so far."""
        return sum(r.sent for r in self.gets)

    def _record(self, request: Request) -> Fault | None:
        """Note the request; the fault it gets, if any (a swap is done here)."""
        if not self.record:
            return None
        with self._lock:
            key = (request.method, request.path, request.start, request.stop)
            request.attempt = self._attempts[key] = self._attempts.get(key, 0) + 1
            self.requests.append(request)
            fault = None
            if request.method == "GET" and self.faults:
                fault = self.faults.pop(0)
            elif self.plan is not None:
                fault = self.plan(request)
            if isinstance(fault, str):
                fault = Fault(fault)
            if fault is not None:
                request.fault = fault.kind
                if fault.kind == "swap" and fault.data is not None:  # a swap's data is checked when it is made
                    self.files[request.path.lstrip("/")] = fault.data
            return fault

    def _etag(self, name: str, data) -> str:
        """A strong ETag for the object now at ``name``: a new one whenever it is replaced."""
        with self._lock:
            held = self._etags.get(name)
            if held is None or held[0] is not data:  # the object itself is held: no id reuse
                held = self._etags[name] = (data, f'"{len(data):x}-{next(self._versions)}"')
            return held[1]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: RangeServer

    def server_bind(self) -> None:
        super().server_bind()
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request, client_address) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            for connection in self.connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hung up is part of the tests, not news


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        owner = self.server.owner
        req = Request("HEAD", self.path, None, None)
        fault = owner._record(req)
        data = owner.files.get(self.path.lstrip("/"))
        if data is None:
            return self._empty(404, req)
        if fault is not None and fault.kind in ("error", "reset"):
            return self._fail(fault, req)
        req.status = 200
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", owner._etag(self.path.lstrip("/"), data))
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
        name = self.path.lstrip("/")
        data = owner.files.get(name)
        start, stop = _parse_range(self.headers.get("Range"), len(data) if data is not None else 0)
        req = Request("GET", self.path, start, stop)
        fault = owner._record(req)
        kind = fault.kind if fault is not None else None
        if fault is not None and fault.kind == "swap":  # answered from the new bytes
            data = fault.data
            assert data is not None  # Fault refuses a swap without data
            start, stop = _parse_range(self.headers.get("Range"), len(data))
        if owner.delay:
            owner._stopping.wait(owner.delay)
        if data is None:
            return self._empty(404, req)
        if fault is not None and fault.kind in ("error", "reset"):
            return self._fail(fault, req)
        size = len(data)
        # _parse_range gives both bounds or neither: ``stop is None`` only tells mypy so.
        content_range = None
        if start is None or stop is None or kind == "whole":
            status, body = 200, memoryview(data)
        elif start >= size or stop <= start:
            return self._empty(416, req, {"Content-Range": f"bytes */{size}"})
        else:
            if kind == "shifted":
                shift = 1 if stop < size else -1 if start > 0 else 0
                start, stop = start + shift, stop + shift
            status, body = 206, memoryview(data)[start:stop]
            content_range = f"bytes {start}-{stop - 1}/{size}"
        half = body[: len(body) // 2]
        req.status = status
        self.send_response(status)
        if content_range is not None:
            self.send_header("Content-Range", content_range)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", owner._etag(name, data))
        self.send_header("Content-Length", str(len(half) if kind == "short" else len(body)))
        self.end_headers()
        if kind in ("cut", "stall", "short"):
            self._send(half, req)
            self.wfile.flush()
            if kind == "stall":
                owner._stopping.wait(owner.stall_seconds)
            if kind != "short":
                self.close_connection = True
            return
        if fault is not None and fault.kind == "flip" and len(body):
            at = fault.at if fault.at is not None else request_rng(owner.seed, req).randrange(len(body))
            req.flipped = (start or 0) + at
            flipped = bytearray(body)  # a copy: the object itself stays intact
            flipped[at] ^= 0xFF
            body = memoryview(flipped)
        self._send(body, req)

    def _send(self, body: memoryview, req: Request) -> None:
        piece = RangeServer.PIECE
        for start in range(0, len(body), piece):
            self.wfile.write(body[start : start + piece])
            req.sent += len(body[start : start + piece])

    def _empty(self, status: int, req: Request, headers: dict | None = None) -> None:
        req.status = status
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _fail(self, fault: Fault, req: Request) -> None:
        """An "error" status (with Retry-After if the fault says), or a reset connection."""
        if fault.kind == "error":
            return self._empty(fault.status, req,
                               {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else None)
        # SO_LINGER with a zero timeout: closing the socket sends RST, not FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True


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


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m lazystore.testing.rangeserver FOLDER``: serve FOLDER, honouring Range, until Ctrl-C.

    Parameters
    ----------
    argv : sequence of str, optional
        The command line's arguments (``sys.argv[1:]`` by default):
        ``FOLDER [--port PORT] [--bind ADDRESS]``.
    """
    parser = argparse.ArgumentParser(prog="python -m lazystore.testing.rangeserver",
                                     description="Serve a folder over HTTP, honouring Range requests.")
    parser.add_argument("folder")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (default 8000)")
    parser.add_argument("--bind", default="127.0.0.1", help="the address to listen on (0.0.0.0: all)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.folder):
        parser.error(f"{args.folder}: not a folder")
    with RangeServer(Folder(args.folder), host=args.bind, port=args.port, record=False) as server:
        print(f"serving {os.path.abspath(args.folder)} at {server.url('')} (Ctrl-C stops)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


__all__ = ["FAULTS", "Every", "Fault", "Folder", "RandomFaults", "RangeServer", "Request", "main"]

if __name__ == "__main__":
    main()
