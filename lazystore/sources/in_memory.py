"""A checkpoint held in memory: the bytes of a file, or what a file object
(``io.BytesIO``, an open file) holds, read as a source like any other.

This is how ``ls.open``, ``ls.load`` and the drop-ins' ``load(data)`` read a
file object or bytes: no temporary file, and the same parsers and checks as
for a file on disk. The bytes are the source's "mapping" (read-only), so
``ck[name]`` is a zero-copy view of them; ``load`` copies each tensor it
returns (checking it on the way, as for a file read with ``mmap=False``), so
its arrays are writable, own their memory, and never change the caller's
bytes.
"""

from __future__ import annotations

import io

from lazystore.errors import InvalidInputError
from lazystore.sources.base import ByteSource


class BytesSource(ByteSource):
    """``size``, ``read_into`` and ``mapped`` over a bytes-like object."""

    def __init__(self, data, name: str = "<bytes>"):
        view = memoryview(data)
        if not view.contiguous:
            raise InvalidInputError(f"{name}: the bytes of a checkpoint must be contiguous")
        self._view = view.cast("B").toreadonly()
        self.size = len(self._view)
        self.name = name
        self._closed = False

    def mapped(self) -> memoryview:
        return self._view

    def read(self, start: int, stop: int) -> memoryview:
        self._check_range(start, stop)
        return self._view[start:stop]

    def read_into(self, offset: int, out) -> None:
        out = memoryview(out).cast("B")
        self._check_range(offset, offset + len(out))
        out[:] = self._view[offset : offset + len(out)]

    def close(self) -> None:
        self._closed = True


def is_file_object(obj) -> bool:
    """A file object (``io.BytesIO``, an open file, anything with ``read``
    or ``write``), as opposed to a path, a URL or bytes."""
    return hasattr(obj, "read") or hasattr(obj, "write")


def check_binary_file(f, action: str) -> None:
    """Raise InvalidInputError unless ``f`` is a binary file object that can
    ``action`` ("read" or "write"), as its ``readable()``/``writable()`` says."""
    able = getattr(f, {"read": "readable", "write": "writable"}[action], None)
    if isinstance(f, io.TextIOBase) or not callable(getattr(f, action, None)) or (callable(able) and not able()):
        raise InvalidInputError(f"expected a binary file object to {action}, got {type(f).__name__}")


def read_file_object(f) -> BytesSource:
    """The bytes of a binary file object from its position to its end, as a
    source (``torch.load`` reads a file object from its position too)."""
    check_binary_file(f, "read")
    data = f.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"{type(f).__name__}.read() gave {type(data).__name__}, not bytes: "
                                f"open the file in binary mode ('rb')")
    return BytesSource(data, name=f"<{type(f).__name__}>")
