"""The validated index: what a file says about its tensors.

The index is untrusted input, validated in two stages (docs/format.md
§13.1, §13.4):

- on open, what ties the file together: the sections, the keys, the
  metadata, and the counts of dims and chunk records (rules E6, E14), in a
  handful of numpy operations whatever the number of tensors;
- each tensor's own entry (dtype, shape, sizes, chunk grid, its chunk
  records and where its bytes lie), in plain Python, the first time that
  tensor is used, before anything derived from it is returned.

So opening a file costs the same few operations for 1 tensor or 100,000,
reading one tensor checks that tensor alone, and a hostile entry is still
refused with a FormatError before any of it is used: never an IndexError,
an overflow, or an allocation sized by its claims. ``verify()`` and any
read of every tensor check every entry.
"""

from __future__ import annotations

import math
import struct
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from lazystore._core import strict_json
from lazystore._core.chunking import ChunkGrid
from lazystore._core.dtypes import BY_CODE
from lazystore._core.keys import KeyTable
from lazystore._native import layout as fmt
from lazystore._native.base_ref import BASE_KEY, DELTA_MINOR, parse_base_ref
from lazystore.codecs import CODECS_BY_ID, DeltaPlanes
from lazystore.errors import FormatError, UnsupportedVersionError

MAX_NDIM = 64  # numpy's own limit
# Rules E7/E8: dims, and sizes computed from them, stay below 2**62, so any
# reader can multiply them in 64-bit integers.
MAX_SIZE = 1 << 62
# A zstd frame expands at most 32768-fold (a 4-byte RLE block yields 128 KiB),
# so a chunk claiming more than this per stored byte is lying.
MAX_EXPANSION = 1 << 15
# Validating more entries than this at once (and at least a 16th of the
# index) reads the index's arrays into Python lists in one go rather than
# entry by entry: converting the whole index costs about as much as
# fetching a 16th of its entries one by one.
BULK_ENTRIES = 64
DELTA_CODEC = DeltaPlanes.id

# An entry read as six 64-bit words; the last packs the small fields.
_ENTRY_SIZE, _CHUNK_SIZE = fmt.ENTRY_DTYPE.itemsize, fmt.CHUNK_DTYPE.itemsize
_WORDS = struct.Struct(f"<{_ENTRY_SIZE // 8}Q")


class Entry(NamedTuple):
    """One tensor's validated entry, as plain Python values: everything a
    read needs, with no numpy call between the index and the data."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    codec: int
    planes: int
    nbytes: int  # decoded size
    stored_nbytes: int
    data_offset: int  # absolute file offset of the first chunk
    padding_end: int  # the zero padding after the tensor ends here
    first_chunk: int  # the index's number for the tensor's chunk 0
    grid: ChunkGrid
    stored: tuple[int, ...]  # stored length of each chunk
    decoded: tuple[int, ...]  # decoded length of each chunk

    @property
    def chunk_count(self) -> int:
        return len(self.stored)

    def chunk_offsets(self) -> list[int]:
        """Absolute file offset of each chunk: they lie back to back."""
        return list(accumulate(self.stored[:-1], initial=self.data_offset))

    def decoded_offsets(self) -> list[int]:
        """Offset of each chunk's bytes within the decoded tensor."""
        return list(accumulate(self.decoded[:-1], initial=0))


class Index:
    """A file's index: its raw arrays, names and metadata, checked on open;
    each tensor's :class:`Entry` is validated on first use (:meth:`entry`).

    ``data_end`` is where tensor data must end. A lazystore file packs its
    tensors at aligned offsets up to the index (rules L3, L4); a foreign
    file's parser has checked its own layout, so there each tensor's bytes
    need only lie inside ``[0, data_end)``.
    """

    def __init__(self, raw: fmt.RawIndex, keys: KeyTable, metadata: dict, data_end: int, *,
                 kind: str = "lazystore", checksums_known: bool = True, unverifiable: str | None = None,
                 minor: int | None = None):
        self.entries = raw.entries
        self.dims = raw.dims
        self.chunks = raw.chunks
        self.alignment = raw.alignment
        self.keys = keys  # name -> position
        self.count = len(keys)
        # The user's metadata, and lazystore's own reserved entries apart.
        self.metadata = {k: v for k, v in metadata.items() if not k.startswith(fmt.RESERVED_METADATA_PREFIX)}
        self.system_metadata = {k: v for k, v in metadata.items() if k.startswith(fmt.RESERVED_METADATA_PREFIX)}
        self.data_end = data_end
        # The format the index was read from ("lazystore", "safetensors"):
        # it decides the layout rule, messages and :meth:`check_head`.
        self.kind = kind
        self.packed = kind == "lazystore"
        # False when the file records no checksums (a safetensors file not
        # written by lazystore): reads skip checks, and verify() cannot run,
        # for the reason ``unverifiable`` gives.
        self.checksums_known = checksums_known
        self.unverifiable = unverifiable
        # The file's format minor version (None for foreign files): a code
        # this package does not know is corruption in a file of a version it
        # implements, and a newer version's addition in a newer file.
        self.minor = minor
        self.dims_start, self.chunk_start = _section_starts(raw, keys)
        # A file with delta tensors names its base (docs/format.md §9.3).
        found = self.system_metadata.get(BASE_KEY)
        self.base = parse_base_ref(found, "the index") if found is not None else None
        if self.base is None and self.packed and self.count and (raw.entries["codec"] == DELTA_CODEC).any():
            raise FormatError(f"delta-coded tensors (codec {DELTA_CODEC}) but no {BASE_KEY} naming their base")
        if self.packed and not self.count and data_end != self.data_start:
            raise FormatError(f"the index starts at {data_end} but an empty file's data ends at {self.data_start}")
        self.identity: tuple[int, int] | None = None  # (index checksum, length), from a lazystore trailer
        self._validated: dict[int, Entry] = {}
        self._described: dict[tuple, _Description] = {}

    # -- entries ---------------------------------------------------------------

    def entry(self, pos: int) -> Entry:
        """Tensor ``pos``'s entry, validated the first time it is asked for."""
        found = self._validated.get(pos)
        if found is None:
            found = self._validated[pos] = self._validate(pos, *self._fetch(pos))
        return found

    def entries_of(self, positions) -> list[Entry]:
        """The entries of many tensors (all of them for ``verify()`` or a
        full load): the index's arrays are read into Python lists once
        rather than entry by entry."""
        positions = list(positions)
        todo = [p for p in positions if p not in self._validated]
        if len(todo) > max(BULK_ENTRIES, self.count // 16):
            words = self.entries.view("<u8").reshape(self.count, _ENTRY_SIZE // 8)
            rows, dims, stored = words.tolist(), self.dims.tolist(), self.chunks["stored_nbytes"].tolist()
            dims_start, chunk_start = self.dims_start, self.chunk_start
            for p in todo:
                row = rows[p]
                ds, cs = dims_start[p], chunk_start[p]
                previous = rows[p - 1] if p else None
                self._validated[p] = self._validate(
                    p, row, tuple(dims[ds : ds + _ndim(row)]), tuple(stored[cs : cs + row[3]]), previous)
        return [self.entry(p) for p in positions]

    def _fetch(self, pos: int):
        """What validating entry ``pos`` reads from the arrays: its row (the
        entry's six 64-bit words; the last packs the small fields), its
        dims, its chunks' stored lengths and the previous row. Unpacked with
        struct: for one entry that is far cheaper than numpy calls."""
        row = _WORDS.unpack_from(self.entries, pos * _ENTRY_SIZE)
        ds, cs, count = self.dims_start[pos], self.chunk_start[pos], row[3]
        dims = struct.unpack_from(f"<{_ndim(row)}Q", self.dims, ds * 8)
        # A chunk record is (stored length, checksum): take every other word.
        stored = struct.unpack_from(f"<{2 * count}Q", self.chunks, cs * _CHUNK_SIZE)[::2]
        previous = _WORDS.unpack_from(self.entries, (pos - 1) * _ENTRY_SIZE) if pos and self.packed else None
        return row, dims, stored, previous

    def _validate(self, pos: int, row, dims: tuple[int, ...], stored: tuple[int, ...], previous) -> Entry:
        """Rules E1-E5 and E7-E13 of the entry, C1-C3 of its chunk records,
        L2 and its part of L3-L4 (docs/format.md §13.4), in Python integers,
        which cannot overflow. ``previous`` is the row before it (lazystore
        files only: tensors are packed in index order).

        Checkpoints repeat a few tensor descriptions (dtype, shape, grid)
        many times, so each distinct one is checked once per index."""
        offset, stored_nbytes, nbytes, count, extent, small = row
        try:
            key = (small, nbytes, count, extent, dims)
            described = self._described.get(key)
            if described is None:
                described = self._described[key] = _describe(small, nbytes, count, extent, dims)
            if described.codec == DELTA_CODEC and self.minor is not None and self.minor < DELTA_MINOR:
                raise FormatError(f"codec {DELTA_CODEC} in a format {fmt.FORMAT_MAJOR}.{self.minor} file "
                                  f"(it is format {fmt.FORMAT_MAJOR}.{DELTA_MINOR})")
            _check_chunks(described, stored, self.data_end)
            if sum(stored) != stored_nbytes:
                raise FormatError("stored size differs from the sum of its chunks")
            padding_end = self._check_place(pos, offset, stored_nbytes, previous)
        except FormatError as exc:
            raise self._entry_error(pos, small, exc) from None
        grid = described.grid
        return Entry(self.keys.name(pos), described.dtype, grid.shape, described.codec, described.planes, nbytes,
                     stored_nbytes, offset, padding_end, self.chunk_start[pos], grid, stored, described.decoded)

    def _entry_error(self, pos: int, small: int, exc: FormatError) -> FormatError:
        """The error for entry ``pos``: a file of a newer minor version whose
        dtype code this package does not know needs a newer lazystore
        (docs/format.md §14); anything else is corruption."""
        name = self.keys.name(pos)
        code, codec = small & 0xFF, small >> 8 & 0xFF
        unknown = f"dtype code {code}" if code not in BY_CODE else f"codec {codec}" if codec not in CODECS_BY_ID \
            else None
        if unknown and self.minor is not None and self.minor > fmt.FORMAT_MINOR:
            return UnsupportedVersionError(
                f"tensor {name!r} has {unknown}, which this lazystore does not know: the file is "
                f"format {fmt.FORMAT_MAJOR}.{self.minor}, newer than the {fmt.FORMAT_MAJOR}.{fmt.FORMAT_MINOR} "
                "it implements; upgrade lazystore to read it")
        return FormatError(f"corrupt index: tensor {name!r}: {exc}")

    def _check_place(self, pos: int, offset: int, stored_nbytes: int, previous) -> int:
        """Where the tensor's bytes lie; returns where its padding ends."""
        end = offset + stored_nbytes
        if not self.packed:
            if end > self.data_end:
                raise FormatError("data beyond the end of the file")
            return end
        if previous is None:
            expected = self.data_start
        else:
            expected = fmt.align_up(previous[0] + previous[1], self.alignment)
        if offset > self.data_end:
            raise FormatError("data offset beyond the index")
        if offset < self.data_start:
            raise FormatError("data offset before the data region")
        if offset != expected:
            raise FormatError("data offset is not where the previous tensor ends")
        padding_end = fmt.align_up(end, self.alignment)
        last = pos == self.count - 1
        if padding_end > self.data_end or (last and padding_end != self.data_end):
            raise FormatError(f"the index starts at {self.data_end} but the data ends at {padding_end}")
        return padding_end

    @property
    def data_start(self) -> int:
        return fmt.align_up(fmt.PREAMBLE.size, self.alignment)

    def check_head(self, source, version) -> None:
        """Check the bytes before the first tensor that no chunk covers: a
        lazystore file's preamble and its padding. A foreign file's header
        is validated whole when it is opened, and nothing else precedes its
        data."""
        if self.kind == "lazystore":
            fmt.check_preamble(source.read(0, self.data_start), self.data_start, version)

    # -- parsing -------------------------------------------------------------

    @classmethod
    def parse(cls, buf, data_end: int, minor: int | None = None) -> Index:
        raw = fmt.decode_index(buf)
        return cls(raw, _decode_keys(raw.keys, len(raw.entries)), _decode_metadata(raw.metadata), data_end,
                   minor=minor)

    @classmethod
    def foreign(cls, raw: fmt.RawIndex, names: list[str], metadata: dict, data_end: int, *, kind: str,
                checksums_known: bool, unverifiable: str | None = None) -> Index:
        """The index of another format's file, built by its parser (see
        :mod:`lazystore.interop`) as lazystore's own arrays, and validated
        by the same rules but the layout one: each tensor's bytes need only
        lie inside ``[0, data_end)``. ``raw.chunks["checksum"]`` is used
        only when ``checksums_known``."""
        return cls(raw, KeyTable.of(names), metadata, data_end, kind=kind, checksums_known=checksums_known,
                   unverifiable=unverifiable)


def _section_starts(raw: fmt.RawIndex, keys: KeyTable) -> tuple[list[int], list[int]]:
    """Where each tensor's dims and chunk records start, after checking that
    the entries account for every dim (rule E6) and chunk record (E14).

    These are the only entry rules that need every entry, so they are the
    ones checked on open. Running sums over Python lists: for the few
    entries of a typical file that beats numpy's per-call cost, and for
    100,000 entries it still takes milliseconds."""
    ndim, counts = raw.entries["ndim"].tolist(), raw.entries["chunk_count"].tolist()
    dims_start = list(accumulate(ndim, initial=0))
    if dims_start.pop() != len(raw.dims):
        raise FormatError(f"shapes need {sum(ndim)} dimensions but the index holds {len(raw.dims)}")
    # Python integers cannot wrap around, whatever the counts claim.
    chunk_start = list(accumulate(counts, initial=0))
    if chunk_start.pop() != len(raw.chunks):
        too_many = next((pos for pos, n in enumerate(counts) if n > len(raw.chunks)), None)
        if too_many is not None:
            raise FormatError(f"corrupt index: tensor {keys.name(too_many)!r}: more chunks than the index holds")
        raise FormatError(f"tensors have {sum(counts)} chunks but the index holds {len(raw.chunks)}")
    return dims_start, chunk_start


# -- the rules of one entry, on Python integers -----------------------------------


def _ndim(row: list[int]) -> int:
    """The ndim byte of an entry's words (see ``format.ENTRY_DTYPE``)."""
    return row[5] >> 16 & 0xFF


class _Description(NamedTuple):
    """What an entry's small fields, sizes and dims describe, once checked."""

    dtype: np.dtype
    grid: ChunkGrid
    codec: int
    planes: int
    decoded: tuple[int, ...]  # decoded length of each chunk


def _describe(small: int, nbytes: int, count: int, extent: int, dims: tuple[int, ...]) -> _Description:
    """Rules E1-E5 and E7-E13 of an entry whose small fields (dtype, codec,
    ndim, chunk axis, planes, reserved bytes) are packed in ``small``."""
    code, codec, ndim, axis, planes = small & 0xFF, small >> 8 & 0xFF, small >> 16 & 0xFF, small >> 24 & 0xFF, \
        small >> 32 & 0xFF
    _check_small_fields(code, codec, ndim, axis, planes, small >> 40)
    dtype = BY_CODE[code].dtype
    grid = ChunkGrid(dims, dtype.itemsize, axis, extent)
    _check_shape(grid, nbytes)
    _check_grid(grid, nbytes, count)
    return _Description(dtype, grid, codec, planes, tuple(grid.raw_nbytes()))


def _check_small_fields(code: int, codec: int, ndim: int, axis: int, planes: int, reserved: int) -> None:
    """Rules E1-E5 and E10."""
    if reserved:
        raise FormatError("reserved entry bytes are not zero")
    if code not in BY_CODE:
        raise FormatError(f"unknown dtype code {code}")
    if codec not in CODECS_BY_ID:
        raise FormatError("unknown codec")
    if codec == 0 and planes != 1:
        raise FormatError("raw tensor with byte planes")
    if codec != 0 and planes not in (1, BY_CODE[code].dtype.itemsize):
        raise FormatError("invalid byte plane count")
    if ndim > MAX_NDIM:
        raise FormatError(f"more than {MAX_NDIM} dimensions")
    if axis >= max(ndim, 1):
        raise FormatError("chunk axis out of range")


def _check_shape(grid: ChunkGrid, nbytes: int) -> None:
    """Rules E7-E9: the size fits, and matches dtype x shape."""
    if grid.shape and max(grid.shape) >= MAX_SIZE:
        raise FormatError("dimension too large")
    elements = math.prod(grid.shape)
    # Zeros count as ones in the first product, so that no shape overflows
    # when a reader builds it, even one without elements.
    spread = elements or math.prod(d or 1 for d in grid.shape)
    if spread >= MAX_SIZE or elements * grid.itemsize >= MAX_SIZE:
        raise FormatError("tensor size overflows")
    if elements * grid.itemsize != nbytes:
        raise FormatError("byte size does not match dtype x shape")


def _check_grid(grid: ChunkGrid, nbytes: int, count: int) -> None:
    """Rules E11-E13: the chunk grid, and the chunk count it implies."""
    if nbytes == 0:
        if grid.extent or grid.axis or count:
            raise FormatError("empty tensor with chunks")
        return
    if not 1 <= grid.extent <= (grid.shape[grid.axis] if grid.shape else 1):
        raise FormatError("chunk extent out of range")
    if count != grid.n_chunks:
        raise FormatError("chunk count does not match the chunk grid")


def _check_chunks(described: _Description, stored: tuple[int, ...], limit: int) -> None:
    """Rules C1-C3 for the tensor's chunk records."""
    if stored and max(stored) > limit:
        raise FormatError("chunk lengths add up to more than the file")
    if described.codec == 0:
        if stored != described.decoded:
            raise FormatError("raw chunk length differs from its decoded length")
        return
    # A delta chunk (codec 2) of zero bytes is one equal to its base's.
    kept = [s for s in stored if s] if described.codec == DELTA_CODEC else stored
    if kept and min(kept) < 4 * described.planes:
        raise FormatError("compressed chunk shorter than its plane header")
    if any(d // MAX_EXPANSION > s for s, d in zip(stored, described.decoded) if s or described.codec != DELTA_CODEC):
        raise FormatError("compressed chunk claims an impossible expansion")


def _decode_keys(blob: bytes, count: int) -> KeyTable:
    """Rules K1 and K2 on the whole key table; K3 is the table's, per key."""
    if blob.count(0) != count or (blob and blob[-1] != 0):
        raise FormatError(f"corrupt index: key table does not hold {count} NUL-terminated keys")
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"corrupt index: keys are not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return KeyTable(text, count)


def _decode_metadata(blob: bytes) -> dict:
    if not blob:
        return {}
    try:
        # The C parser guards its recursion, so absurd nesting is a
        # RecursionError here, never a crash.
        value = strict_json.loads(blob, unique_keys=False)  # format.md: the last duplicate wins
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt metadata: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("corrupt metadata: not a JSON object")
    return value
