from __future__ import annotations

import errno
import mmap
import os
import stat

from lazystore.errors import FormatError
from lazystore.sources.base import ByteSource


class LocalFile(ByteSource):
    """A local file, memory-mapped read-only.

    Views handed out keep the mapping alive after ``close()``, so arrays read
    from a checkpoint stay valid after the checkpoint is closed. Replacing
    the file (as every lazystore save does) never affects an open mapping.
    """

    def __init__(self, path):
        self.name = os.fspath(path)
        self._fd = os.open(self.name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            # Map first and ask questions only if that fails: opening is a
            # few syscalls, and each one counts when a file is opened to
            # read one tensor.
            self._map = mmap.mmap(self._fd, 0, access=mmap.ACCESS_READ)
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

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def mapped(self) -> memoryview:
        return self._view

    def private_mapping(self) -> memoryview | None:
        # A fresh MAP_PRIVATE mapping: pages are shared with the page cache
        # until written, then copied for this process alone (torch.load's
        # mmap=True does the same).
        if not self.size:
            return None
        return memoryview(mmap.mmap(self._fd, 0, access=mmap.ACCESS_COPY))

    def read(self, start: int, stop: int) -> memoryview:
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
