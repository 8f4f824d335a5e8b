"""Servers that ignore Range, above all Python's own ``python -m http.server``.

Such a server answers every range request with 200 and the whole object.
lazystore must see that in the first answer's status line, close the
connection before the body arrives, and raise RangeNotSupportedError (a
RemoteError) saying so, without asking again: no object downloaded whole,
let alone three times over.
"""

from __future__ import annotations

import functools
import http.client
import os
import re
import select
import signal
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import lazystore as ls
from lazystore.sources import http_ranges
from lazystore.testing.rangeserver import Every
from tests.paths import REPO
from tests.sources.checkpoints import file_bytes, tensors

BIG = 64 << 20  # the big checkpoint's size, roughly


class CountingHandler(SimpleHTTPRequestHandler):
    """Python's own file handler (no Range support), counting the GETs it
    answers and the body bytes it hands to the socket."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        server = self.server
        with server.lock:
            server.gets += 1
            server.busy += 1
        try:
            super().do_GET()
        finally:
            with server.lock:
                server.busy -= 1
                server.lock.notify_all()

    def copyfile(self, source, outputfile) -> None:
        while piece := source.read(1 << 16):
            outputfile.write(piece)  # raises once the client has closed the connection
            with self.server.lock:
                self.server.sent += len(piece)


class PlainHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder):
        super().__init__(("127.0.0.1", 0), functools.partial(CountingHandler, directory=str(folder)))
        self.lock = threading.Condition()
        self.gets = self.sent = self.busy = 0

    def handle_error(self, request, client_address) -> None:
        pass  # the client hanging up mid-body is what these tests want

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"

    def settled(self) -> tuple[int, int]:
        """(GETs, body bytes sent) once no answer is being written (waits at most 10 s)."""
        with self.lock:
            self.lock.wait_for(lambda: self.busy == 0, timeout=10)
            return self.gets, self.sent


@pytest.fixture
def plain_server(tmp_path):
    server = PlainHTTPServer(tmp_path)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory):
    """A ~64 MiB checkpoint of 16 raw 4 MiB tensors: (bytes, tensors)."""
    rng = np.random.default_rng(0)
    arrays = {f"layer.{i}.weight": rng.standard_normal((1024, 1024), dtype=np.float32) for i in range(16)}
    return file_bytes(tmp_path_factory.mktemp("big"), arrays), arrays


def assert_range_refused(err, url) -> None:
    message = str(err.value)
    assert isinstance(err.value, ls.RemoteError) and isinstance(err.value, OSError)
    assert url in message and "ignores HTTP Range requests" in message, message
    assert "docs/remote.md" in message and not re.search(r"\b_[A-Z]", message), message  # no private names


@pytest.mark.slow
@pytest.mark.parametrize("read", ["open", "load"])
def test_python_http_server_is_refused_at_its_first_answer(tmp_path, plain_server, big_checkpoint, read):
    data, arrays = big_checkpoint
    (tmp_path / "ck.lzy").write_bytes(data)
    url = plain_server.url("ck.lzy")
    with pytest.raises(ls.RangeNotSupportedError) as err:
        if read == "open":
            ls.open(url)
        else:
            ls.load(url, keys=["layer.3.weight"])
    assert_range_refused(err, url)
    gets, sent = plain_server.settled()
    assert gets == 1  # the index read, refused at once: not asked again
    # The connection is closed at the status line: what was sent is what the
    # socket buffers took before that, not the object.
    assert sent < len(data) // 4, (sent, len(data))


def test_a_small_checkpoint_opens_then_its_first_range_is_refused(tmp_path, plain_server):
    arrays = tensors(2, seed=1)  # 2 x 128 KiB raw: more than the 64 KiB tail read
    arrays = {k: v[:32] for k, v in arrays.items()}  # 2 x 16 KiB: the whole file fits in the tail
    (tmp_path / "ck.lzy").write_bytes(file_bytes(tmp_path, arrays))
    url = plain_server.url("ck.lzy")
    # The tail read asks for the whole object: a 200 with all of it is the answer asked for.
    with ls.open(url) as ck:
        assert list(ck) == list(arrays)
        assert plain_server.settled()[0] == 1
        with pytest.raises(ls.RangeNotSupportedError) as err:
            ck["layer.1.weight"]
    assert_range_refused(err, url)
    assert plain_server.settled()[0] == 2


@pytest.mark.parametrize("read", ["item", "slice", "load", "verify"])
def test_a_server_that_stops_honouring_range_is_refused_without_retries(tmp_path, server, read):
    arrays = tensors(8)
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays, compression="zstd")
    url = server.url("ck.lzy")
    with ls.open(url) as ck:
        server.clear()
        server.plan = Every(1, "whole")
        with pytest.raises(ls.RangeNotSupportedError) as err:
            {"item": lambda: ck["layer.3.weight"],
             "slice": lambda: ck.get_slice("layer.5.weight")[17:90],
             "load": lambda: ck.load(["layer.0.weight", "layer.3.weight", "layer.6.weight"]),
             "verify": lambda: ck.verify(["layer.0.weight", "layer.3.weight"])}[read]()
    assert_range_refused(err, url)
    asked = [(r.start, r.stop) for r in server.gets]
    assert asked and len(asked) == len(set(asked)) and all(r.fault == "whole" for r in server.gets)


def test_without_aiohttp_middlewares_the_whole_answer_is_still_refused_once(tmp_path, plain_server, monkeypatch):
    # aiohttp before 3.12 cannot look at an answer before fsspec reads it:
    # the whole object comes once, and is refused by its length.
    monkeypatch.setattr(http_ranges, "aiohttp_has_middlewares", lambda: False)
    (tmp_path / "ck.lzy").write_bytes(file_bytes(tmp_path, tensors(2)))
    url = plain_server.url("ck.lzy")
    with pytest.raises(ls.RangeNotSupportedError) as err:
        ls.open(url)
    assert_range_refused(err, url)
    assert plain_server.settled()[0] == 1


@pytest.mark.slow
def test_the_users_own_aiohttp_middlewares_still_run(tmp_path, server):
    # Per-request middlewares replace the session's in aiohttp: lazystore's
    # check must come in addition to the user's (an auth middleware, say).
    arrays = tensors(4)
    server.files["ck.lzy"] = file_bytes(tmp_path, arrays)
    seen = []

    async def note(request, handler):
        seen.append(request.method)
        return await handler(request)

    options = {"client_kwargs": {"middlewares": (note,)}}
    loaded = ls.load(server.url("ck.lzy"), keys=["layer.1.weight", "layer.3.weight"], storage_options=options)
    assert all(np.array_equal(loaded[k], arrays[k]) for k in loaded) and len(loaded) == 2
    assert seen.count("GET") == len(server.gets) >= 2
    server.clear()
    server.plan = Every(1, "whole")
    with pytest.raises(ls.RangeNotSupportedError):
        ls.load(server.url("ck.lzy"), keys=["layer.1.weight"], storage_options=options)
    assert len(server.gets) == 1


# ---------------------------------------------------------------------------
# the one-line server docs/remote.md recommends
# ---------------------------------------------------------------------------


@pytest.fixture
def served_folder(tmp_path):
    """``python -m lazystore.testing.rangeserver FOLDER --port 0``, as a user
    runs it: (the URL it prints, the folder)."""
    folder = tmp_path / "models"
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-m", "lazystore.testing.rangeserver", str(folder), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
        url = re.search(r"http://\S+/", line)
        assert url, (line, process.poll())
        yield url[0], folder
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(timeout=10) == 0, process.stderr.read()
        finally:
            process.kill()
            process.communicate()


@pytest.mark.slow
def test_the_one_line_server_serves_checkpoints_in_ranges(served_folder, tmp_path):
    url, folder = served_folder
    arrays = tensors(8)
    (folder / "sub").mkdir()
    (folder / "sub" / "ck.lzy").write_bytes(file_bytes(tmp_path, arrays, compression="zstd"))
    with ls.open(url + "sub/ck.lzy") as ck:
        assert np.array_equal(ck["layer.5.weight"], arrays["layer.5.weight"])
        assert np.array_equal(ck.get_slice("layer.2.weight")[10:20], arrays["layer.2.weight"][10:20])
        assert ck.verify() == []
    loaded = ls.load(url + "sub/ck.lzy", keys=["layer.1.weight", "layer.7.weight"])
    assert all(np.array_equal(loaded[k], arrays[k]) for k in loaded) and len(loaded) == 2
    with pytest.raises(FileNotFoundError):
        ls.open(url + "nothing.lzy")


@pytest.mark.slow
def test_the_one_line_server_serves_nothing_outside_its_folder(served_folder, tmp_path):
    url, folder = served_folder
    (folder / "ck.lzy").write_bytes(b"inside")
    (tmp_path / "secret.lzy").write_bytes(b"outside the folder")
    (folder / "sub").mkdir()
    (folder / "link.lzy").symlink_to(tmp_path / "secret.lzy")
    os.mkfifo(folder / "pipe.lzy")  # opening it for reading must not hang the server
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
    # Raw paths: a client library would tidy the dots away before sending.
    paths = ["/../secret.lzy", "/sub/../../secret.lzy", "/%2e%2e/secret.lzy", "/link.lzy", "/sub", "/pipe.lzy", "/"]
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for path in paths + ["/ck.lzy"]:
            connection.request("GET", path, headers={"Range": "bytes=0-5"})
            answer = connection.getresponse()
            assert (answer.status, answer.read()) == ((206, b"inside") if path == "/ck.lzy" else (404, b"")), path
    finally:
        connection.close()
