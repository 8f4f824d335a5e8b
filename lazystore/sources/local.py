from __future__ import annotations

import errno
import mmap as mapping
import os
import stat
import sys

from lazystore._core.file_names import file_kind
from lazystore.errors import FormatError
from lazystore.sources.base import ByteSource

# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
# forever. It changes nothing for a regular file: reads of one never block.
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
# A mapping keeps a descriptor of its own (a dup) unless told not to, which
# Python can from 3.13: with keep_fd=False the mapping then holds none.
_UNTRACKED = {"trackfd": False} if sys.version_info >= (3, 13) else {}


def not_regular(path: str, mode: int) -> FormatError:
    """The error for ``path``, of mode ``mode``, which is not a regular file."""
    return FormatError(f"{path} is not a regular file ({file_kind(mode)}): a checkpoint is a regular file")


def refuse_unopenable(path: str, exc: OSError) -> None:
    """Raise :func:`not_regular`'s error if ``os.open`` failed with ``exc``
    because ``path`` is no regular file (a socket cannot be opened at all);
    return otherwise."""
    if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP, errno.ENODEV):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode) from None


class LocalFile(ByteSource):
    """A local file, memory-mapped read-only.

    Views handed out keep the mapping alive after ``close()``, so arrays read
    from a checkpoint stay valid after the checkpoint is closed. Replacing
    the file (as every lazystore save does) never affects an open mapping.

    With ``mmap=False`` the file is not mapped and every read is a ``pread``
    into a new buffer: pages a mapping would keep resident (and count in the
    process's memory) are not, so streaming through a file larger than
    memory keeps memory bounded.

    Anything but a regular file (a FIFO, a device, a socket) is refused with
    a FormatError naming it, never waited on; a folder raises
    IsADirectoryError (a folder may be a sharded checkpoint).

    ``fd``: a file descriptor already open on ``path`` (see
    :mod:`lazystore.sources.safe_files`), which the source then owns. With
    ``keep_fd=False`` a mapped file's descriptor is closed once it is mapped:
    the mapping alone holds the file, with the one descriptor Python's mmap
    keeps before Python 3.13 and none from 3.13 (a delta file's chain of up
    to 64 bases is held that way).
    """

    # (device, inode) of the file, when opened by lazystore.sources.safe_files.
    identity: tuple[int, int] | None = None
    _map: mapping.mmap | None  # None: not mapped (or empty), or closed

    def __init__(self, path, *, mmap: bool = True, fd: int | None = None, keep_fd: bool = True):
        self.name = os.fspath(path)
        self._closed = False
        if fd is None:
            try:
                fd = os.open(self.name, OPEN_FLAGS)
            except OSError as exc:
                refuse_unopenable(self.name, exc)
                raise
        self._fd = fd
        if not mmap:
            self._open_unmapped()
            return
        try:
            # Map first and ask questions only if that fails: opening is a
            # few syscalls, and each one counts when a file is opened to
            # read one tensor.
            self._map = mapping.mmap(self._fd, 0, access=mapping.ACCESS_READ, **({} if keep_fd else _UNTRACKED))
        except ValueError:  # an empty file cannot be mapped
            self._map = None
        except OSError:
            mode = os.fstat(self._fd).st_mode
            os.close(self._fd)
            self._refuse(mode)  # told from the open file: no second lookup of the path
            raise
        except BaseException:
            os.close(self._fd)
            raise
        self.size = len(self._map) if self._map is not None else 0
        self._view = memoryview(self._map) if self._map is not None else memoryview(b"")
        self._mapped = True
        if not keep_fd:
            os.close(self._fd)
            self._fd = -1

    def _open_unmapped(self) -> None:
        try:
            st = os.fstat(self._fd)
            self._refuse(st.st_mode)
        except BaseException:
            os.close(self._fd)
            raise
        self._map, self.size, self._mapped = None, st.st_size, False
        self._view = memoryview(b"")

    def _refuse(self, mode: int) -> None:
        """Raise unless ``mode`` is a regular file's."""
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.name) from None
        if not stat.S_ISREG(mode):
            raise not_regular(self.name, mode) from None

    def mapped(self) -> memoryview | None:
        return self._view if self._mapped else None

    def private_mapping(self) -> memoryview | None:
        # A fresh MAP_PRIVATE mapping: pages are shared with the page cache
        # until written, then copied for this process alone (torch.load's
        # mmap=True does the same).
        if not self.size or not self._mapped or self._fd < 0:
            return None
        return memoryview(mapping.mmap(self._fd, 0, access=mapping.ACCESS_COPY))

    def read(self, start: int, stop: int) -> memoryview:
        if not self._mapped:
            return super().read(start, stop)
        self._check_range(start, stop)
        return self._view[start:stop]

    def read_into(self, offset: int, out) -> None:
        # pread straight into the caller's buffer: faster than faulting in
        # the mapping page by page, and it releases the GIL.
        out = memoryview(out).cast("B")
        self._check_range(offset, offset + len(out))
        if self._fd < 0:  # held by its mapping alone (keep_fd=False)
            out[:] = self._view[offset : offset + len(out)]
            return
        done = 0
        while done < len(out):
            n = os.preadv(self._fd, [out[done:]], offset + done)
            if n == 0:
                raise FormatError(f"EOF: {self.name} shrank while being read")
            done += n

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # Dropping the references unmaps the file now, or, while arrays read
        # from it are alive, with the last of them (closing the map
        # explicitly would raise BufferError then).
        self._view, self._map = memoryview(b""), None
