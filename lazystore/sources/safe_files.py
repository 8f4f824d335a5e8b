"""Opening a file by a name that another file gave: the one way it is done.

A delta file names its base, a sharded folder's index names its shards, a
manager's folder its steps: names read from bytes that anyone may have
written. Every such file is opened here, so that

- it is a file directly in the folder: the name is a plain file name, and a
  symbolic link is followed only to a file in the same folder (a folder is
  moved or copied whole; a link out of it reads some other file);
- it is a regular file, opened without blocking (a plain ``open`` of a FIFO
  waits for a writer forever; a device or a socket is no checkpoint);
- every ``OSError`` is a :class:`~lazystore.errors.FormatError` naming the
  file; only a missing file stays :class:`FileNotFoundError`, for the
  caller to say what is missing (a base, a shard, a step);
- for a remote folder, the name cannot make the URL mean another object.

Identity is the file's device and inode (``LocalFile.identity``: the
``fstat`` of what was opened), never its name: two names may be one file.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from lazystore._core.file_names import is_plain_file_name
from lazystore.errors import FormatError
from lazystore.sources.base import ByteSource
from lazystore.sources.dispatch import local_path, open_source
from lazystore.sources.local import OPEN_FLAGS, LocalFile, not_regular, refuse_unopenable

# A link is followed only after it is resolved and found in the folder; the
# file is then opened with O_NOFOLLOW, so it cannot become a link between.
_NO_LINKS = OPEN_FLAGS | getattr(os, "O_NOFOLLOW", 0)
# Characters a URL gives a meaning: an escape ("%2E%2E" is ".."), a query, a
# fragment ("..?q=", "..#x" ask for ".."), a separator to some servers.
_URL_SPECIAL = re.compile(r"[%?#\\;\x00-\x1f\x7f]")


def open_in_folder(folder, name: str, *, mmap: bool = True, keep_fd: bool = True) -> LocalFile:
    """The regular file ``name`` directly in the local folder ``folder``, as
    a :class:`LocalFile` (``mmap`` and ``keep_fd`` as there).

    Raises FileNotFoundError when there is no such file (a dangling link
    included), and FormatError naming the file for anything else: a name
    that is not a plain file name, a link out of the folder, a FIFO, a
    device, a socket, a folder, or any other error of the system."""
    folder = os.fspath(folder)
    path = os.path.join(folder, name)
    if not is_plain_file_name(name):
        raise FormatError(f"{name!r} is not a plain file name in {folder}")
    try:
        fd = _open_nofollow(folder, path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        refuse_unopenable(path, exc)
        raise FormatError(f"{path} cannot be opened: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise FormatError(f"{path} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise not_regular(path, st.st_mode)
    try:
        source = LocalFile(path, mmap=mmap, fd=fd, keep_fd=keep_fd)  # owns fd from here, closed on failure
    except OSError as exc:
        raise FormatError(f"{path} cannot be read: {exc.strerror or exc}") from None
    source.identity = (st.st_dev, st.st_ino)
    return source


def _open_nofollow(folder: str, path: str) -> int:
    """A descriptor of ``path``; a link only if it resolves into ``folder``."""
    try:
        return os.open(path, _NO_LINKS)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EMLINK):  # EMLINK: FreeBSD's O_NOFOLLOW on a link
            raise
    target = os.path.realpath(path)
    here = os.stat(folder)
    try:
        there = os.stat(os.path.dirname(target))
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "a link to nothing", path) from None
    if (there.st_dev, there.st_ino) != (here.st_dev, here.st_ino):
        raise FormatError(f"{path} is a link out of the folder (to {target}): a file named by another "
                          "is read only from the same folder")
    return os.open(target, _NO_LINKS)


def sibling_url(location: str, name: str) -> str:
    """The URL of the file ``name`` beside the object at URL ``location``.
    FormatError for a name that would make the URL ask for anything else:
    the name is a plain file name, so only what a URL gives a meaning to
    (escapes, queries, fragments) could."""
    if not is_plain_file_name(name) or _URL_SPECIAL.search(name):
        raise FormatError(f"{name!r} cannot name a file beside {location} in a URL: it holds characters a URL "
                          "gives a meaning (% ? # \\ ; or control characters)")
    return location.rsplit("/", 1)[0] + "/" + name


def open_beside(location: str, name: str, *, mmap: bool = True, keep_fd: bool = True,
                storage_options=None) -> ByteSource:
    """The file ``name`` beside ``location`` (a local path or a URL), opened
    as :func:`open_in_folder` does for a local one; for a URL, by
    :func:`sibling_url`."""
    local = local_path(location)
    if local is None:
        return open_source(sibling_url(location, name), storage_options)
    return open_in_folder(os.path.dirname(local) or ".", name, mmap=mmap, keep_fd=keep_fd)
