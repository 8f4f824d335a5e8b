"""Servers that ignore Range, above all Python's own ``python -m http.server``.

Such a server answers every range request with 200 and the whole object.
lazystore must see that in the first answer's status line, close the
connection before the body arrives, and raise RangeNotSupportedError (a
RemoteError) saying so, without asking again: no object downloaded whole,
let alone three times over.
"""

from __future__ import annotations

import functools
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

import lazystore as ls
from lazystore.sources import http_ranges
from lazystore.testing.rangeserver import Every
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
