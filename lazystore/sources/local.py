from __future__ import annotations

import errno
import mmap as mapping
import os
import stat

from lazystore.errors import FormatError
from lazystore.sources.base import ByteSource


class LocalFile(ByteSource):
    """A local file, memory-mapped read-only.

    Views handed out keep the mapping alive after ``close()``, so arrays read
    from a checkpoint stay valid after the checkpoint is closed. Replacing
    the file (as every lazystore save does) never affects an open mapping.

    With ``mmap=False`` the file is not mapped and every read is a ``pread``
    into a new buffer: pages a mapping would keep resident (and count in the
    process's memory) are not, so streaming through a file larger than
    memory keeps memory bounded.
    """

    def __init__(self, path, *, mmap: bool = True):
        self.name = os.fspath(path)
        self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        if not mmap:
            self._open_unmapped()
            return
        try:
            # Map first and ask questions only if that fails: opening is a
            # few syscalls, and each one counts when a file is opened to
            # read one tensor.
            self._map = mapping.mmap(self._fd, 0, access=mapping.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            self._map = None
        except OSError:
            mode = os.fstat(self._fd).st_mode
            os.close(self._fd)
            if stat.S_ISDIR(mode):  # told from the open file: no second lookup of the path
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.name) from None
            raise
        except BaseException:
            os.close(self._fd)
            raise
        self.size = len(self._map) if self._map is not None else 0
        self._view = memoryview(self._map) if self._map is not None else memoryview(b"")
        self._mapped = True

    def _open_unmapped(self) -> None:
        try:
            st = os.fstat(self._fd)
        except BaseException:
            os.close(self._fd)
            raise
        if stat.S_ISDIR(st.st_mode):
            os.close(self._fd)
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), self.name)
        self._map, self.size, self._mapped = None, st.st_size, False
        self._view = memoryview(b"")

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def mapped(self) -> memoryview | None:
        return self._view if self._mapped else None

    def private_mapping(self) -> memoryview | None:
        # A fresh MAP_PRIVATE mapping: pages are shared with the page cache
        # until written, then copied for this process alone (torch.load's
        # mmap=True does the same).
        if not self.size or not self._mapped:
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
        done = 0
        while done < len(out):
            n = os.preadv(self._fd, [out[done:]], offset + done)
            if n == 0:
                raise FormatError(f"EOF: {self.name} shrank while being read")
            done += n

    def close(self) -> None:
        if self._fd < 0:
            return
        os.close(self._fd)
        self._fd = -1
        # Dropping the references unmaps the file now, or, while arrays read
        # from it are alive, with the last of them (closing the map
        # explicitly would raise BufferError then).
        self._view, self._map = memoryview(b""), None
