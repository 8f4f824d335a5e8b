"""Making what is no regular file, inside a test's tmp_path: a FIFO, a
character device (as /dev/null or /dev/zero), a unix socket. A test skips
where the system does not allow it."""

from __future__ import annotations

import os
import socket
import stat

import pytest

DEV_NULL = os.makedev(1, 3)
DEV_ZERO = os.makedev(1, 5)


def make_fifo(path) -> None:
    os.mkfifo(path)


def make_device(path, device=DEV_ZERO) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, device)
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")


def make_socket(path) -> None:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(os.fspath(path))
    except OSError as exc:
        pytest.skip(f"cannot bind a unix socket here: {exc}")
    finally:
        s.close()
