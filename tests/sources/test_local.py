"""Local files: what ``ls.open`` of a path that is no regular file does.

A FIFO would make a plain ``open`` wait for a writer forever, a device reads
forever or not at all, a socket cannot be opened: each is refused at once
with a FormatError naming it. A folder is a sharded checkpoint or a
FormatError; a missing file stays FileNotFoundError.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from tests.sources.special_files import DEV_NULL, make_device, make_fifo, make_socket


@pytest.mark.parametrize("make, kind", [
    (make_fifo, "a FIFO"), (lambda p: make_device(p, DEV_NULL), "a character device"), (make_socket, "a socket")],
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
    with pytest.raises(ls.FormatError, match="a folder, but not a checkpoint"):
        ls.open(tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        ls.open(tmp_path / "nothing.lzy")


def test_a_regular_file_still_opens_mapped_and_unmapped(tmp_path):
    ls.save({"a": np.arange(6.0)}, tmp_path / "ck.lzy")
    for mmap in (True, False):
        with ls.open(tmp_path / "ck.lzy", mmap=mmap) as ck:
            assert ck["a"].tolist() == list(range(6))
