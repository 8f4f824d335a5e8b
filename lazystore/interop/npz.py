"""``.npz`` archives, read for conversion: each member streamed once, in order.

A zip member (deflated, or stored) can only be read from its start: reading
part of a deflated member means inflating everything before it. ``convert``
and ``diff`` read a large tensor in blocks, in order
(:func:`lazystore._core.blocks.blocks`), so :class:`NpzArchive` keeps the
last member's stream open where the last read stopped and the next block
continues from there: a member is inflated once, holding one block and the
inflater's window, never the whole member. A read behind the stream's
position starts the member again (``inflations`` counts the starts).

An array stored in Fortran order (``fortran_order`` in its ``.npy``
header) is laid out column by column, so row blocks are not runs of its
bytes: it is read whole, once, and kept until another member is read.

Every size a member claims is checked against something real before
anything is allocated: its uncompressed size (in the zip directory) must be
exactly its ``.npy`` header plus shape x itemsize, at most what its
compressed bytes can expand to, and those must lie inside the archive.
Nothing is ever unpickled (``allow_pickle=False`` semantics: object arrays
are refused).
"""

from __future__ import annotations

import math
import os
import threading
import zipfile
import zlib
from typing import NamedTuple

import numpy as np

from lazystore._core.slicing import rebase
from lazystore.errors import FormatError

# Deflate cannot expand input more than about 1032:1 (258 bytes from a
# 2-bit code, plus block overhead); a member claiming more lies.
MAX_DEFLATE_RATIO = 1032
# How much of a member is read from the inflater at once: the temporary
# bytes object each read makes, on top of the block being filled.
READ_PIECE = 1 << 20
# numpy writes .npy headers of a few hundred bytes.
MAX_HEADER_BYTES = 1 << 16
# What reading a damaged member raises (a bad CRC, a broken deflate stream, ...).
_READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error)


class Member(NamedTuple):
    """One array of an archive, from its zip entry and ``.npy`` header."""

    key: str  # the array's name: the member's name without ".npy"
    zinfo: zipfile.ZipInfo
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran: bool
    data_start: int  # where the array's bytes start in the uncompressed member
    nbytes: int


class NpzArchive:
    """The arrays of an ``.npz``, read a part at a time (see the module docstring).

    Thread-safe: reads of one archive take turns (they share one stream)."""

    def __init__(self, path) -> None:
        self.path = os.fspath(path)
        self.inflations = 0  # member streams started, for tests and measurements
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise FormatError(f"{self.path}: not a readable .npz: {exc}") from None
        self._lock = threading.Lock()
        self._stream: _Cursor | None = None  # the last member's stream, where the last read stopped
        self._whole: tuple[str, np.ndarray] | None = None  # the last Fortran-order member read
        try:
            self.members = self._read_members()
        except BaseException:
            self._zip.close()
            raise

    def _error(self, key: str, why) -> FormatError:
        return FormatError(f"{self.path}: array {key!r}: {why}")

    def _read_members(self) -> dict[str, Member]:
        members: dict[str, Member] = {}
        size = os.path.getsize(self.path)
        for zinfo in self._zip.infolist():
            if not zinfo.filename.endswith(".npy"):
                raise FormatError(f"{self.path}: member {zinfo.filename!r} is not an .npy array")
            key = zinfo.filename[:-4]
            if key in members:
                raise FormatError(f"{self.path}: array {key!r} is in the archive twice")
            members[key] = self._member(key, zinfo, size)
        return members

    def _member(self, key: str, zinfo: zipfile.ZipInfo, archive_size: int) -> Member:
        if zinfo.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise self._error(key, f"compression method {zinfo.compress_type} (numpy writes stored or deflated "
                                   "members; lazystore reads no other)")
        if zinfo.header_offset + zinfo.compress_size > archive_size:
            raise self._error(key, f"claims {zinfo.compress_size:,} compressed bytes, past the end of the archive")
        ratio = 1 if zinfo.compress_type == zipfile.ZIP_STORED else MAX_DEFLATE_RATIO
        if zinfo.file_size > zinfo.compress_size * ratio + MAX_HEADER_BYTES:
            raise self._error(key, f"claims {zinfo.file_size:,} bytes from {zinfo.compress_size:,} compressed ones, "
                                   "more than its compression can expand to")
        try:
            with self._zip.open(zinfo) as f:
                version = np.lib.format.read_magic(f)  # refuses unknown versions
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0  # 2.0 and 3.0 (UTF-8 names) share a layout
                shape, fortran, dtype = read(f, max_header_size=MAX_HEADER_BYTES)
                data_start = f.tell()
        except FormatError:
            raise
        except _READ_ERRORS as exc:
            raise self._error(key, f"corrupt .npy header: {exc}") from None
        if dtype.hasobject:
            raise self._error(key, "holds Python objects (a pickle); lazystore never unpickles")
        nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
        if zinfo.file_size != data_start + nbytes:
            raise self._error(key, f"its member holds {zinfo.file_size:,} bytes, but its header says "
                                   f"{data_start:,} + {nbytes:,} (shape {shape}, {dtype})")
        return Member(key, zinfo, dtype, tuple(shape), bool(fortran), data_start, nbytes)

    # -- reading ------------------------------------------------------------------------

    def whole(self, key: str) -> np.ndarray:
        """The whole array: a new array (read-only for a Fortran-order one
        that a part read keeps)."""
        m = self.members[key]
        with self._lock:
            kept = self._whole
            return kept[1] if kept is not None and kept[0] == key else self._array(m)

    def part(self, key: str, index, picks: list[range]) -> np.ndarray:
        """``array[index]``, reading only the run of bytes holding ``picks``
        (the elements ``index`` selects on each axis: ``slicing.selection``)."""
        m = self.members[key]
        if any(len(p) == 0 for p in picks):
            return np.empty(tuple(len(p) for p in picks), m.dtype)[rebase(index)]
        with self._lock:
            if m.fortran:
                box = self._kept(m)[tuple(_ascending(p) for p in picks)]
            else:
                box = self._box(m, picks)
        return box[rebase(index)]

    def _array(self, m: Member) -> np.ndarray:
        flat = self._read(m, 0, m.nbytes).view(m.dtype)
        return flat.reshape(m.shape[::-1]).T if m.fortran else flat.reshape(m.shape)

    def _kept(self, m: Member) -> np.ndarray:
        """A Fortran-order array, read whole once for all its part reads."""
        if self._whole is None or self._whole[0] != m.key:
            self._whole = None  # freed before the next is read
            array = self._array(m)
            array.flags.writeable = False  # handed out by whole() too
            self._whole = (m.key, array)
        return self._whole[1]

    def _box(self, m: Member, picks: list[range]) -> np.ndarray:
        """The elements ``picks`` select, every axis ascending, from the one
        contiguous run of the (C-order) array that holds them: the leading
        axes picking one element each, then the span of the next axis."""
        shape, itemsize = m.shape, m.dtype.itemsize
        k = next((a for a, p in enumerate(picks) if len(p) > 1), len(shape))
        strides = [math.prod(shape[a + 1:]) for a in range(len(shape))]
        start = sum(p[0] * s for p, s in zip(picks[:k], strides[:k]))
        subs = [slice(0, 1)] * k
        if k == len(shape):  # one element
            region_shape, stop = (1,) * k, start + 1
        else:
            span = _ascending(picks[k])
            lo, hi = span.start, span.stop
            start += lo * strides[k]
            stop = start + (hi - lo) * strides[k]
            region_shape = (1,) * k + (hi - lo,) + shape[k + 1:]
            subs += [slice(0, hi - lo, span.step)] + [_ascending(p) for p in picks[k + 1:]]
        region = self._read(m, start * itemsize, stop * itemsize).view(m.dtype).reshape(region_shape)
        return region[tuple(subs)]

    def _read(self, m: Member, start: int, stop: int) -> np.ndarray:
        """Bytes ``start:stop`` of ``m``'s array data (a new array), from the
        member's stream: continued, or started again when behind ``start``."""
        out = np.empty(stop - start, np.uint8)
        try:
            cursor = self._cursor(m, m.data_start + start)
            done = 0
            while done < len(out):
                piece = cursor.read(min(READ_PIECE, len(out) - done))
                out[done:done + len(piece)] = np.frombuffer(piece, np.uint8)
                done += len(piece)
        except BaseException as exc:
            self._drop_stream()  # a stream broken off mid-read is never continued
            if isinstance(exc, FormatError) or not isinstance(exc, _READ_ERRORS):
                raise
            raise self._error(m.key, f"cannot read it: {exc}") from None
        return out

    def _cursor(self, m: Member, position: int) -> _Cursor:
        """The member's stream, moved to ``position`` of the uncompressed member."""
        cursor = self._stream
        if cursor is None or cursor.key != m.key or cursor.at > position:
            self._drop_stream()
            cursor = self._stream = _Cursor(m.key, self._zip.open(m.zinfo), self._error)
            self.inflations += 1
        while cursor.at < position:
            cursor.read(min(READ_PIECE, position - cursor.at))  # skipped: a new stream, or a gap
        return cursor

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.file.close()
            self._stream = None

    def close(self) -> None:
        with self._lock:
            self._drop_stream()
            self._whole = None
            self._zip.close()


class _Cursor:
    """An open member stream and how far it has been read."""

    __slots__ = ("at", "error", "file", "key")

    def __init__(self, key: str, file, error):
        self.key, self.file, self.error, self.at = key, file, error, 0

    def read(self, n: int) -> bytes:
        piece = self.file.read(n)
        if not piece:  # zipfile stops at the claimed size, so this is a stream that ends early
            raise self.error(self.key, f"its member ends after {self.at:,} bytes, short of its claimed size")
        self.at += len(piece)
        return piece


def _ascending(r: range) -> slice:
    """The slice of a non-empty range's elements in ascending order."""
    lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
    return slice(lo, hi + 1, abs(r.step))
