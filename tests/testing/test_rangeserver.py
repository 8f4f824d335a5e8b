"""lazystore.testing.rangeserver: a Folder's files can be replaced (by
assignment or a "swap" fault) as a dict's byte strings can; a server not
running says so."""

from __future__ import annotations

import urllib.request

import pytest

from lazystore.errors import ClosedError
from lazystore.testing.rangeserver import Fault, Folder, RangeServer


def fetch(url: str, headers: dict | None = None) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as answer:
        return answer.read()


def test_a_swap_fault_replaces_a_folders_file_without_touching_the_disk(tmp_path):
    (tmp_path / "ck.lzy").write_bytes(b"old bytes")
    with RangeServer(Folder(tmp_path)) as server:
        server.faults.append(Fault("swap", data=b"new bytes!"))
        assert fetch(server.url("ck.lzy"), {"Range": "bytes=0-2"}) == b"new"
        assert fetch(server.url("ck.lzy")) == b"new bytes!"  # it stays replaced
    assert (tmp_path / "ck.lzy").read_bytes() == b"old bytes"


def test_a_folders_file_can_be_replaced_by_assignment(tmp_path):
    (tmp_path / "ck.lzy").write_bytes(b"old")
    with RangeServer(Folder(tmp_path)) as server:
        with urllib.request.urlopen(server.url("ck.lzy"), timeout=5) as answer:
            before = answer.headers["ETag"]
        server.files["ck.lzy"] = b"other"
        with urllib.request.urlopen(server.url("ck.lzy"), timeout=5) as answer:
            assert answer.read() == b"other"
            assert answer.headers["ETag"] != before


def test_the_url_of_a_server_not_running_is_refused_clearly():
    server = RangeServer({"ck.lzy": b"x"})
    with pytest.raises(ClosedError, match="not running"):
        server.url("ck.lzy")
    with server:
        assert server.url("ck.lzy").startswith("http://127.0.0.1:")
    with pytest.raises(ClosedError, match="not running"):
        server.port
