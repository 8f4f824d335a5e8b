"""Checking the entry rules of many entries at once.

A batch is the one tensor a read asks for, a run of them when a caller
reads tensor after tensor, or all 100,000 of a full load. The rules are
:mod:`lazystore._native.entry_rules`'s, whatever the batch:

- the batch is reduced to its distinct descriptions, and each is checked
  once (:func:`~lazystore._native.entry_rules.describe`);
- :func:`~lazystore._native.entry_rules.chunk_and_place_rules` runs once
  over numpy arrays of the whole batch (:class:`_Many`), or, for a single
  entry with few chunks, where numpy's per-call cost would dominate, over
  Python integers (:class:`~lazystore._native.entry_rules.One`).

An entry that breaks a rule gets the message of the first rule it breaks,
in the order §13.4 lists them; the others in the batch are unaffected.
"""

from __future__ import annotations

from itertools import chain
from typing import NamedTuple

import numpy as np

from lazystore._native.entry_rules import (
    CONTENT_DELTA_CODEC,
    EXPONENT_CODECS,
    SEALED_RAW_CODEC,
    TAG_BYTES,
    Description,
    Fields,
    Layout,
    One,
    chunk_and_place_rules,
    describe,
    first_broken,
    padding_end_of,
)
from lazystore.codecs import DELTA_CODEC_IDS, SEALED_CODEC_IDS
from lazystore.codecs.float_planes import mode_bytes
from lazystore.errors import FormatError

# Batches up to this size find their distinct descriptions with a dict of
# tuples (a microsecond for one entry); larger ones by hashing in numpy.
DICT_DEDUPE_ROWS = 256
# A single entry with up to this many chunks is checked in Python integers.
ONE_ENTRY_CHUNKS = 64

# The columns of an entry read as six 64-bit words (see ``format.ENTRY_DTYPE``).
OFFSET, STORED, NBYTES, COUNT, EXTENT, SMALL = range(6)
_U64 = np.uint64


class Sections(NamedTuple):
    """The index's arrays a batch is checked against."""

    words: np.ndarray  # (count, 6) uint64: the entries
    dims: np.ndarray  # uint64
    stored: np.ndarray  # uint64: each chunk record's stored length
    dims_start: np.ndarray  # int64: where each entry's dims start (rule E6 checked)
    chunk_start: np.ndarray  # int64: where each entry's chunk records start (rule E14 checked)


class Checked(NamedTuple):
    """The verdict on a batch of entries: the fields of those that passed,
    a list per field, and the refused ones apart."""

    pos: list[int]  # ascending
    descriptions: list[Description]
    offset: list[int]
    stored_nbytes: list[int]
    padding_end: list[int]
    first_chunk: list[int]
    stored: list  # each entry's chunks' stored lengths (a tuple), None where raw: its decoded ones
    refused: dict[int, str]  # position -> the message of the first rule it breaks


def check_batch(sections: Sections, layout: Layout, pos: np.ndarray, described: dict) -> Checked:
    """Every entry rule for the entries at ``pos`` (ascending int64, none
    twice). ``described`` caches what each description checked to (a
    :class:`Description`, or the FormatError it raised) across batches."""
    rows = sections.words[pos]
    descs, desc_of = _descriptions(rows, pos, sections, described)
    table = _DescriptionTable.of(descs)
    chunks = _Many(rows, pos, desc_of, table, sections)
    raw = table.raw[desc_of]
    previous = sections.words[np.maximum(pos - 1, 0)]
    expected = np.where(pos > 0, padding_end_of(previous[:, OFFSET], previous[:, STORED], layout, np.minimum),
                        _U64(layout.data_start))
    delta = table.delta[desc_of]
    sealed_raw, sealed = table.sealed_raw[desc_of], table.sealed[desc_of]
    exponent = table.exponent[desc_of]
    fields = Fields(rows[:, OFFSET], rows[:, STORED], raw, ~raw & ~sealed_raw, delta, table.content[desc_of], ~delta,
                    table.planes[desc_of], expected, pos == layout.n_tensors - 1, sealed_raw, sealed,
                    sealed.astype(_U64) * _U64(TAG_BYTES), exponent, table.modes[desc_of])
    broken, padding_end = chunk_and_place_rules(fields, chunks, layout)
    masks = np.vstack([~table.ok[desc_of]] + [verdict for _, verdict in broken])  # a row per rule, in order
    bad = np.flatnonzero(masks.any(axis=0))
    refused = {}
    if len(bad):
        messages = [None] + [message for message, _ in broken]
        first = masks[:, bad].argmax(axis=0).tolist()
        for i, rule, (offset, stored) in zip(bad.tolist(), first, rows[bad, :2].tolist()):
            message = messages[rule] or str(descs[desc_of[i]])
            refused[int(pos[i])] = message(offset + stored) if callable(message) else message
        kept = np.ones(len(pos), bool)
        kept[bad] = False
        pos, rows, desc_of, padding_end = pos[kept], rows[kept], desc_of[kept], padding_end[kept]
        starts = chunks.starts[kept]
    else:
        starts = chunks.starts
    by_number = np.empty(len(descs), object)  # so numpy picks each entry's description
    for i, d in enumerate(descs):
        by_number[i] = d
    described_of = by_number[desc_of].tolist()
    stored = [None] * len(pos)
    compressed = np.flatnonzero(~table.raw[desc_of])
    if len(compressed):
        listed = chunks.stored.tolist()
        for i, k in zip(compressed.tolist(), starts[compressed].tolist()):
            stored[i] = tuple(listed[k : k + len(described_of[i].decoded)])
    return Checked(pos.tolist(), described_of, rows[:, OFFSET].tolist(), rows[:, STORED].tolist(),
                   padding_end.tolist(), sections.chunk_start[pos].tolist(), stored, refused)


def check_one(layout: Layout, pos: int, row: tuple, dims: tuple, stored: tuple, first_chunk: int,
              previous: tuple | None, described: dict) -> Checked:
    """:func:`check_batch` of one entry, in Python integers: its ``row`` (six
    words), ``dims``, chunks' ``stored`` lengths (from ``first_chunk``) and
    the ``previous`` row (None for entry 0). For an entry of a few chunks,
    where numpy's per-call cost would dominate."""
    offset, stored_nbytes, nbytes, count, extent, small = row
    d = _described((nbytes, count, extent, small, *dims), described)
    if not isinstance(d, Description):
        return Checked([], [], [], [], [], [], [], {pos: str(d)})
    expected = layout.data_start if previous is None else padding_end_of(previous[0], previous[1], layout, min)
    raw, delta, sealed_raw, sealed = d.codec == 0, d.codec in DELTA_CODEC_IDS, d.codec == SEALED_RAW_CODEC, \
        d.codec in SEALED_CODEC_IDS
    exponent = d.codec in EXPONENT_CODECS
    fields = Fields(offset, stored_nbytes, raw, not (raw or sealed_raw), delta, d.codec == CONTENT_DELTA_CODEC,
                    not delta, d.planes, expected, pos == layout.n_tensors - 1, sealed_raw, sealed,
                    TAG_BYTES if sealed else 0, exponent, mode_bytes(d.planes) if exponent else 0)
    broken, padding_end = chunk_and_place_rules(fields, One(stored, d.decoded), layout)
    message = first_broken(broken, offset, stored_nbytes)
    if message is not None:
        return Checked([], [], [], [], [], [], [], {pos: message})
    return Checked([pos], [d], [offset], [stored_nbytes], [padding_end], [first_chunk], [None if raw else stored],
                   {})


class _Many:
    """A batch's chunk records, as ``chunk_and_place_rules`` reads them, in
    numpy arrays over every chunk of the batch.

    E14 bounds each chunk count by the index's records, and the batch's
    entries are distinct, so the batch has no more chunks than the index.
    A refused description counts as describing no chunk: its entries are
    refused by its own rule, which comes first."""

    minimum = staticmethod(np.minimum)

    def __init__(self, rows: np.ndarray, pos: np.ndarray, desc_of: np.ndarray, table: _DescriptionTable,
                 sections: Sections):
        counts = rows[:, COUNT].astype(np.int64)
        self.ends = np.cumsum(counts)
        self.starts = self.ends - counts
        self.total = int(self.ends[-1]) if len(self.ends) else 0
        self.owner = np.repeat(np.arange(len(rows)), counts)
        local = np.arange(self.total) - self.starts[self.owner]
        self.stored = sections.stored[sections.chunk_start[pos][self.owner] + local]
        of = desc_of[self.owner]
        # Past its description's list only where the description was refused.
        self.decoded = table.decoded[np.minimum(table.decoded_at[of] + local, len(table.decoded) - 1)]

    def spread(self, field: np.ndarray) -> np.ndarray:
        return field[self.owner]

    def any(self, test) -> np.ndarray:
        counted = np.zeros(self.total + 1, np.int64)
        np.cumsum(test(self.stored, self.decoded), out=counted[1:])
        return counted[self.ends] > counted[self.starts]

    def sum_differs(self, totals: np.ndarray) -> np.ndarray:
        """Sums in uint64, which may wrap: a float64 sum flags the entries
        whose true sum might reach 2**62, and those are summed exactly."""
        sums = np.zeros(self.total + 1, _U64)
        np.cumsum(self.stored, out=sums[1:])
        differs = sums[self.ends] - sums[self.starts] != totals
        near = np.bincount(self.owner, weights=self.stored, minlength=len(totals)) >= 2.0**62
        for i in np.flatnonzero(near).tolist():
            differs[i] = sum(self.stored[self.starts[i] : self.ends[i]].tolist()) != int(totals[i])
        return differs


# -- descriptions (E1-E5, E7-E13), once per distinct one ---------------------------------


def _descriptions(rows: np.ndarray, pos: np.ndarray, sections: Sections, described: dict):
    """The distinct descriptions in the batch (each a Description or the
    FormatError it raised) and, per entry, the number of its own."""
    keys, desc_of = _distinct_keys(rows, pos, sections)
    return [_described(key, described) for key in keys], desc_of


def _described(key: tuple, described: dict):
    """What the description ``key`` (nbytes, chunk count, extent, small
    fields, then the dims) checks to, once per index."""
    found = described.get(key)
    if found is None:
        try:
            found = describe(key[3], key[0], key[1], key[2], key[4:])
        except FormatError as exc:
            found = exc
        described[key] = found
    return found


def _distinct_keys(rows: np.ndarray, pos: np.ndarray, sections: Sections) -> tuple[list[tuple], np.ndarray]:
    """The distinct description keys (nbytes, chunk count, extent, small
    fields, then the dims) of a batch, and each entry's number among them:
    a dict of tuples for a few entries, hashing in numpy for many."""
    if len(rows) <= DICT_DEDUPE_ROWS:
        dims = sections.dims
        rows = rows[:, NBYTES:].tolist()
        return _dedupe([tuple(r) + tuple(dims[at : at + (r[3] >> 16 & 0xFF)].tolist())
                        for r, at in zip(rows, sections.dims_start[pos].tolist())])
    ndim = (rows[:, SMALL] >> _U64(16)) & _U64(0xFF)
    keys: list[tuple] = []
    desc_of = np.empty(len(rows), np.int64)
    for d in np.unique(ndim).tolist():
        sel = np.flatnonzero(ndim == d)
        group = np.empty((len(sel), 4 + d), _U64)
        group[:, :4] = rows[sel, NBYTES:]
        group[:, 4:] = sections.dims[sections.dims_start[pos[sel]][:, None] + np.arange(d)]
        if (group == group[0]).all():  # one description throughout (a run of experts, say)
            found, ids = [tuple(group[0].tolist())], np.zeros(len(group), np.int64)
        else:
            h = group[:, 0].copy()
            for j in range(1, group.shape[1]):
                h = h * _U64(0x9E3779B97F4A7C15) ^ group[:, j]
            _, firsts, ids = np.unique(h, return_index=True, return_inverse=True)
            if (group == group[firsts][ids]).all():  # no two distinct keys share a hash
                found = list(map(tuple, group[firsts].tolist()))
            else:
                found, ids = _dedupe(list(map(tuple, group.tolist())))
        desc_of[sel] = ids.reshape(-1) + len(keys)
        keys += found
    return keys, desc_of


def _dedupe(keys: list[tuple]) -> tuple[list[tuple], np.ndarray]:
    seen: dict = {}
    ids = [seen.setdefault(k, len(seen)) for k in keys]
    return list(seen), np.array(ids, np.int64)


class _DescriptionTable(NamedTuple):
    """What the chunk rules need of a batch's distinct descriptions, as
    arrays indexed by description number; a refused description counts as
    describing no chunk (its entries are refused by its own rule first)."""

    ok: np.ndarray  # bool: the description passed
    raw: np.ndarray  # bool: codec 0
    delta: np.ndarray  # bool: codec 2 or 3
    content: np.ndarray  # bool: codec 3
    sealed_raw: np.ndarray  # bool: codec 128
    sealed: np.ndarray  # bool: codec 128, 129 or 132
    exponent: np.ndarray  # bool: codec 4 or 132
    modes: np.ndarray  # uint64: a codec-4 chunk's mode bytes with their padding, else 0
    planes: np.ndarray  # uint64
    decoded_at: np.ndarray  # int64: where its chunks' decoded lengths start in ``decoded``
    decoded: np.ndarray  # uint64, every description's decoded lengths, then a 0

    @classmethod
    def of(cls, descs: list) -> _DescriptionTable:
        good = [d if isinstance(d, Description) else None for d in descs]
        lists = [d.decoded if d else () for d in good]
        decoded_at = np.cumsum([0] + [len(x) for x in lists])
        return cls(np.array([d is not None for d in good], bool),
                   np.array([d is not None and d.codec == 0 for d in good], bool),
                   np.array([d is not None and d.codec in DELTA_CODEC_IDS for d in good], bool),
                   np.array([d is not None and d.codec == CONTENT_DELTA_CODEC for d in good], bool),
                   np.array([d is not None and d.codec == SEALED_RAW_CODEC for d in good], bool),
                   np.array([d is not None and d.codec in SEALED_CODEC_IDS for d in good], bool),
                   np.array([d is not None and d.codec in EXPONENT_CODECS for d in good], bool),
                   np.array([mode_bytes(d.planes) if d and d.codec in EXPONENT_CODECS else 0 for d in good], _U64),
                   np.array([d.planes if d else 0 for d in good], _U64), decoded_at[:-1],
                   np.fromiter(chain(chain.from_iterable(lists), (0,)), _U64, int(decoded_at[-1]) + 1))


