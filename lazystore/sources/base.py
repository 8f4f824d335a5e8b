from __future__ import annotations

import numpy as np

from lazystore.errors import FormatError


class ByteSource:
    """Random access to an immutable byte string (a file, an object)."""

    size: int
    name: str
    _closed: bool = False

    @property
    def closed(self) -> bool:
        return self._closed

    def read_into(self, offset: int, out) -> None:
        """Fill the writable buffer ``out`` with the bytes at ``offset``."""
        raise NotImplementedError

    def read(self, start: int, stop: int):
        """Bytes ``[start, stop)`` as a bytes-like object (may be a view)."""
        self._check_range(start, stop)
        out = np.empty(stop - start, dtype=np.uint8)
        self.read_into(start, out)
        return out.data  # a memoryview of out's bytes

    def read_many(self, ranges) -> list:
        """The bytes of each ``(start, stop)`` range, in the order given.

        A remote source overrides this to merge nearby ranges and fetch them
        concurrently; here it is one ``read`` after another.
        """
        return [self.read(start, stop) for start, stop in ranges]

    def mapped(self) -> memoryview | None:
        """The whole source as a read-only memoryview, when it is mapped."""
        return None

    def private_mapping(self) -> memoryview | None:
        """A writable, copy-on-write mapping of the whole source, or None.

        Writes land in private pages of this process, never in the source."""
        return None

    def check_unchanged(self) -> None:
        """Raise if the source is no longer what it was when opened (a remote
        object replaced or deleted since). Readers ask this when bytes fail
        their checksum twice, to tell a replaced object from a damaged one;
        a source that cannot change under its reader does nothing."""

    def close(self) -> None:
        pass

    def _check_range(self, start: int, stop: int) -> None:
        if not 0 <= start <= stop <= self.size:
            raise FormatError(f"EOF: reading bytes {start}-{stop} of {self.name}, which has {self.size} bytes")
