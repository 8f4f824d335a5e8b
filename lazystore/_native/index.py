"""The validated index: what a file says about its tensors.

The index is untrusted input, validated in two stages (docs/format.md
§13.1, §13.4):

- on open, what ties the file together: the sections, the keys, the
  metadata, and the counts of dims and chunk records (rules E6, E14: two
  sums over the entries, milliseconds for 100,000);
- each tensor's own entry (dtype, shape, sizes, chunk grid, its chunk
  records and where its bytes lie) the first time that tensor is used,
  before anything derived from it is returned, by the rules of
  :mod:`lazystore._native.entry_rules`, which check a batch of entries at
  once: the one tensor a read asks for, a growing run of them when a
  caller reads tensor after tensor, or all of them for a full load.

So opening a file costs the same few operations for 1 tensor or 100,000,
reading one tensor checks that tensor alone, and a hostile entry is still
refused with a FormatError before any of it is used: never an IndexError,
an overflow, or an allocation sized by its claims. ``verify()`` and any
read of every tensor check every entry.
"""

from __future__ import annotations

import struct
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from lazystore._core import strict_json
from lazystore._core.chunking import ChunkGrid
from lazystore._core.dtypes import BY_CODE
from lazystore._core.keys import KeyTable
from lazystore._native import chunk_digests, entry_batch, entry_rules
from lazystore._native import layout as fmt
from lazystore._native.base_ref import BASE_KEY, parse_base_ref
from lazystore._native.entry_rules import Description
from lazystore._native.sealed_index import SealedIndex, sealed_index
from lazystore.codecs import CODECS_BY_ID, DELTA_CODEC_IDS
from lazystore.errors import FormatError, UnsupportedVersionError

# An entry read as six 64-bit words; the last packs the small fields.
_ENTRY_SIZE, _CHUNK_SIZE = fmt.ENTRY_DTYPE.itemsize, fmt.CHUNK_DTYPE.itemsize
_WORDS = struct.Struct(f"<{_ENTRY_SIZE // 8}Q")

# Reading tensor after tensor (``ck[name]`` in a loop over the names)
# checks entries a run at a time, the run doubling from the first size to
# the last: one tensor costs a run of the first size, a loop over 100,000
# a few dozen runs.
FIRST_RUN, LAST_RUN = 16, 4096


class Entry(NamedTuple):
    """One tensor's validated entry, as plain Python values: everything a
    read needs, with no numpy call between the index and the data. What it
    shares with other tensors of its description (dtype, shape, grid,
    codec) is one shared :class:`~lazystore._native.entry_rules.Description`:
    an entry is made per tensor, so it holds few fields."""

    name: str
    described: Description
    stored_nbytes: int
    data_offset: int  # absolute file offset of the first chunk
    padding_end: int  # the zero padding after the tensor ends here
    first_chunk: int  # the index's number for the tensor's chunk 0
    compressed_stored: tuple[int, ...] | None  # a compressed tensor's: see ``stored``

    @property
    def stored(self) -> tuple[int, ...]:
        """Stored length of each chunk: a raw chunk's is its decoded length."""
        own = self.compressed_stored
        return self.described.decoded if own is None else own

    @property
    def nbytes(self) -> int:
        """Decoded size."""
        return self.described.nbytes

    @property
    def dtype(self) -> np.dtype:
        return self.described.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.described.shape

    @property
    def codec(self) -> int:
        return self.described.codec

    @property
    def planes(self) -> int:
        return self.described.planes

    @property
    def grid(self) -> ChunkGrid:
        return self.described.grid

    @property
    def decoded(self) -> tuple[int, ...]:
        """Decoded length of each chunk."""
        return self.described.decoded

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
        # Per chunk record, the xxh3 of the decoded base chunk a codec-3
        # chunk was coded against (format 1.3), where the records hold it.
        self.base_checksums = raw.base_checksums
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
        # Each entry's ndim and chunk count, as checked (Python lists).
        self._ndims, self._counts = _check_section_counts(raw, keys)
        # A file with delta tensors names its base (docs/format.md §9.3).
        found = self.system_metadata.get(BASE_KEY)
        self.base = parse_base_ref(found, "the index") if found is not None else None
        deltas = sorted(DELTA_CODEC_IDS)
        if self.base is None and self.packed and self.count and np.isin(raw.entries["codec"], deltas).any():
            raise FormatError(f"delta-coded tensors (codec {' or '.join(map(str, deltas))}) but no {BASE_KEY} "
                              "naming their base")
        if self.packed and not self.count and data_end != self.data_start:
            raise FormatError(f"the index starts at {data_end} but an empty file's data ends at {self.data_start}")
        self.identity: tuple[int, int] | None = None  # (index checksum, length), from a lazystore trailer
        self.sealing: SealedIndex | None = None  # an encrypted file's (format 1.4): set by parse
        # The chunks' cryptographic digests (format 1.4, rule G1), where the file declares them.
        self.digests = chunk_digests.declared(self.system_metadata, raw, minor if self.packed else None)
        self._validated: dict[int, Entry] = {}
        self._refused: dict[int, tuple[int, int, str]] = {}  # position -> (dtype code, codec, message)
        self._described: dict[tuple, object] = {}  # see entry_batch.check_batch
        self._run = FIRST_RUN
        self._layout = entry_rules.Layout(self.packed, self.data_start, data_end, self.alignment, self.count,
                                          minor, raw.base_checksums is not None,
                                          self.digests is not None and self.digests.rows is not None
                                          and self.digests.base_rows is None)
        # Made on first use (see _batch_sections): opening costs nothing per entry.
        self._sections: entry_batch.Sections | None = None
        self._checked: np.ndarray | None = None  # per entry: validated or refused, for batches

    # -- entries ---------------------------------------------------------------

    def entry(self, pos: int) -> Entry:
        """Tensor ``pos``'s entry, validated the first time it is asked for."""
        found = self._validated.get(pos)
        if found is None:
            if pos not in self._refused:
                if self.keys.listed:
                    self._check(self._next_run(pos))
                elif self._counts[pos] <= entry_batch.ONE_ENTRY_CHUNKS:
                    # Names looked up one by one: the one entry alone, in
                    # Python integers, where numpy's per-call cost would
                    # dominate (opening a file to read one tensor).
                    self._take(entry_batch.check_one(self._layout, pos, *self._fetch(pos), self._described))
                else:
                    self._check(np.array([pos], np.int64))
            found = self._validated.get(pos)
            if found is None:
                raise self._refusal(pos)
        return found

    def entries_of(self, positions) -> list[Entry]:
        """The entries of many tensors (all of them for ``verify()`` or a
        full load), checked together; the first refused one raises."""
        checked = self._checked_mask()
        if isinstance(positions, range):
            todo = np.arange(positions.start, positions.stop, positions.step)
        else:
            positions = list(positions)
            todo = np.array(positions, np.int64)
        todo = todo[~checked[todo]]
        if len(todo) > 1 and not (todo[1:] > todo[:-1]).all():  # ascending, once each
            todo = np.unique(todo)
        if len(todo):
            self._check(todo)
        validated = self._validated
        try:
            return [validated[p] for p in positions]
        except KeyError:
            raise self._refusal(next(p for p in positions if p not in validated)) from None

    def _fetch(self, pos: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int,
                                        tuple[int, ...] | None]:
        """What checking entry ``pos`` alone reads from the arrays: its row
        (six 64-bit words; the last packs the small fields), dims, chunks'
        stored lengths, first chunk's number and the previous row. Unpacked
        with struct: for one entry that is far cheaper than numpy calls."""
        # The ignores: the arrays are buffers, but numpy's stubs say so only
        # on Python 3.12 and later.
        row = _WORDS.unpack_from(self.entries, pos * _ENTRY_SIZE)  # type: ignore[arg-type]
        # Sums of the counts before it (a C-level pass, fast even at the end
        # of 100,000 entries): cheaper than keeping running sums from the open.
        dims_start, first_chunk, count = sum(self._ndims[:pos]), sum(self._counts[:pos]), row[3]
        dims = struct.unpack_from(f"<{self._ndims[pos]}Q", self.dims, dims_start * 8)  # type: ignore[arg-type]
        # A chunk record is (stored length, checksum): take every other word.
        stored = struct.unpack_from(f"<{2 * count}Q", self.chunks,  # type: ignore[arg-type]
                                    first_chunk * _CHUNK_SIZE)[::2]
        previous = _WORDS.unpack_from(self.entries, (pos - 1) * _ENTRY_SIZE) if pos else None  # type: ignore[arg-type]
        return row, dims, stored, first_chunk, previous

    def _batch_sections(self) -> entry_batch.Sections:
        """The arrays a batch of entries is checked against (made on the
        first batch: opening costs nothing per entry), and which entries
        are checked."""
        if self._sections is None:
            ndim = self.entries["ndim"].astype(np.int64)
            counts = self.entries["chunk_count"].astype(np.int64)  # each within the index (E14)
            self._sections = entry_batch.Sections(
                self.entries.view("<u8").reshape(self.count, _ENTRY_SIZE // 8), self.dims,
                self.chunks["stored_nbytes"], np.cumsum(ndim) - ndim, np.cumsum(counts) - counts)
            self._checked = np.zeros(self.count, bool)
            self._checked[list(self._validated)] = True
            self._checked[list(self._refused)] = True
        return self._sections

    def _checked_mask(self) -> np.ndarray:
        """Per entry: validated or refused (made with the batch sections)."""
        self._batch_sections()
        assert self._checked is not None  # _batch_sections made it
        return self._checked

    def _next_run(self, pos: int) -> np.ndarray:
        """The unchecked entries of a run from ``pos``, each run twice the last."""
        checked = self._checked_mask()
        run = np.arange(pos, min(pos + self._run, self.count))
        self._run = min(2 * self._run, LAST_RUN)
        return run[~checked[run]]

    def _check(self, pos: np.ndarray) -> None:
        """Validate the entries at ``pos`` (ascending, none checked yet)."""
        sections = self._batch_sections()
        self._take(entry_batch.check_batch(sections, self._layout, pos, self._described))
        self._checked_mask()[pos] = True

    def _take(self, c: entry_batch.Checked) -> None:
        """Keep a batch's verdicts: an Entry for each that passed."""
        for p, message in c.refused.items():
            self._refused[p] = (int(self.entries["dtype"][p]), int(self.entries["codec"][p]), message)
        make = tuple.__new__  # Entry's own constructor, without a Python call per entry
        self._validated.update(zip(c.pos, [make(Entry, fields) for fields in zip(
            self.keys.names(c.pos), c.descriptions, c.stored_nbytes, c.offset, c.padding_end, c.first_chunk,
            c.stored)]))

    def _refusal(self, pos: int) -> FormatError:
        """The error for refused entry ``pos`` (a new one on every use): a
        file of a newer minor version whose dtype code this package does not
        know needs a newer lazystore (docs/format.md §14); anything else is
        corruption."""
        code, codec, message = self._refused[pos]
        name = self.keys.name(pos)
        unknown = f"dtype code {code}" if code not in BY_CODE else f"codec {codec}" if codec not in CODECS_BY_ID \
            else None
        if unknown and self.minor is not None and self.minor > fmt.FORMAT_MINOR:
            return UnsupportedVersionError(
                f"tensor {name!r} has {unknown}, which this lazystore does not know: the file is "
                f"format {fmt.FORMAT_MAJOR}.{self.minor}, newer than the {fmt.FORMAT_MAJOR}.{fmt.FORMAT_MINOR} "
                "it implements; upgrade lazystore to read it")
        return FormatError(f"corrupt index: tensor {name!r}: {message}")

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
        index = cls(raw, _decode_keys(raw.keys, len(raw.entries)), _decode_metadata(raw.metadata), data_end,
                    minor=minor)
        index.sealing = sealed_index(index.system_metadata, raw.entries, minor, buf)  # rules S3, S4
        return index

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


def _check_section_counts(raw: fmt.RawIndex, keys: KeyTable) -> tuple[list[int], list[int]]:
    """Rules E6 and E14: the entries account for every dim and chunk record.

    These are the only entry rules that need every entry, so they are the
    ones checked on open: sums of Python integers, which cannot wrap
    around, and cheaper than numpy's reductions over a record field for
    the few entries of a typical file (for 100,000 they take milliseconds)."""
    ndims = raw.entries["ndim"].tolist()
    if sum(ndims) != len(raw.dims):
        raise FormatError(f"shapes need {sum(ndims)} dimensions but the index holds {len(raw.dims)}")
    counts = raw.entries["chunk_count"].tolist()
    if sum(counts) != len(raw.chunks):
        too_many = next((pos for pos, n in enumerate(counts) if n > len(raw.chunks)), None)
        if too_many is not None:
            raise FormatError(f"corrupt index: tensor {keys.name(too_many)!r}: more chunks than the index holds")
        raise FormatError(f"tensors have {sum(counts)} chunks but the index holds {len(raw.chunks)}")
    return ndims, counts


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
    except strict_json.TooLarge as exc:  # valid JSON, maybe, but refused before it is parsed
        raise FormatError(f"metadata too large to read: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt metadata: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("corrupt metadata: not a JSON object")
    return value
