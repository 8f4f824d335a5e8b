"""Fixtures shared by the remote tests: the HTTP range server and moto's S3 server, on loopback."""

from __future__ import annotations

import logging
import uuid

import fsspec
import pytest

from lazystore.testing.rangeserver import RangeServer


@pytest.fixture
def server():
    with RangeServer() as s:
        yield s


@pytest.fixture(scope="session")
def s3_options():
    """storage_options for a ThreadedMotoServer on 127.0.0.1 (the way s3fs's own tests run)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    yield {"client_kwargs": {"endpoint_url": f"http://{host}:{port}"}, "key": "x", "secret": "y"}
    moto.stop()


@pytest.fixture
def bucket(s3_options):
    """A new, empty bucket."""
    name = f"lazystore-{uuid.uuid4().hex[:12]}"
    fsspec.filesystem("s3", **s3_options).mkdir(name)
    return name
