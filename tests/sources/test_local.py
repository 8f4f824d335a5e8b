"""Local files: what ``ls.open`` of a path that is no regular file does.

A FIFO would make a plain ``open`` wait for a writer forever, a device reads
forever or not at all, a socket cannot be opened: each is refused at once
with a FormatError naming it. A folder is a sharded checkpoint or a
FormatError; a missing file stays FileNotFoundError.
"""

from __future__ import annotations

import os
import socket
import stat

import numpy as np
import pytest

import lazystore as ls


def _fifo(path):
    os.mkfifo(path)


def _device(path):
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # as /dev/null
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")


def _socket(path):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(os.fspath(path))
    except OSError as exc:
        pytest.skip(f"cannot bind a unix socket here: {exc}")
    finally:
        s.close()


@pytest.mark.parametrize("make, kind", [(_fifo, "a FIFO"), (_device, "a character device"), (_socket, "a socket")],
                         ids=["fifo", "device", "socket"])
@pytest.mark.parametrize("mmap", [True, False], ids=["mapped", "unmapped"])
def test_a_path_that_is_no_regular_file_is_refused_naming_it(tmp_path, make, kind, mmap):
    path = tmp_path / "ck.lzy"
    make(path)
    with pytest.raises(ls.FormatError, match=rf"{path} is not a regular file \({kind}\)"):
        ls.open(path, mmap=mmap)
    with pytest.raises(ls.FormatError, match="not a regular file"):
        ls.load(path)


def test_a_folder_or_a_missing_file(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ls.FormatError, match="not a sharded checkpoint"):
        ls.open(tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        ls.open(tmp_path / "nothing.lzy")


def test_a_regular_file_still_opens_mapped_and_unmapped(tmp_path):
    ls.save({"a": np.arange(6.0)}, tmp_path / "ck.lzy")
    for mmap in (True, False):
        with ls.open(tmp_path / "ck.lzy", mmap=mmap) as ck:
            assert ck["a"].tolist() == list(range(6))
