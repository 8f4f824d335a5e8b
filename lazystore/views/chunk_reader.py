"""Reading chunks: fetch stored bytes, check them, decode into place.

Every way of reading (``ck[name]``, ``get_slice``, ``load``, ``verify``)
goes through ChunkReader, so checksum and decode rules live in one place.

A mapped source (a local file) is read in place, chunk by chunk, on the
thread pool. Any other source (remote storage, memory) has its bytes
*fetched*: the byte ranges of all the chunks wanted go to the source's
``read_many`` together, a batch at a time, so a remote source can merge
them into few requests and send those concurrently; then the chunks are
checked and decoded in parallel. Every chunk fetched is checked against its
checksum, raw ones too: hashing costs little next to fetching.

A *verified* read (``strong``: ``verify=True``, ``load``'s default,
``verify()``) of a file with chunk digests (format 1.4) checks each chunk's
cryptographic digest instead of its xxh3 (rule G2), and a codec-3 chunk's
base digest instead of its base checksum (G3): see
:mod:`lazystore._native.chunk_digests`.

A foreign file without checksums (``Index.checksums_known`` false: a
safetensors file lazystore did not write) is read the same way with the
checks skipped; ``CheckpointView.verify`` refuses to run on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from itertools import accumulate
from typing import cast

import numpy as np

from lazystore._core.batching import batch_by_bytes
from lazystore._core.checksum import all_zero, check, digest
from lazystore._core.chunking import SlicePlan
from lazystore._core.parallel import run_all
from lazystore._core.scratch import scratch
from lazystore._native.index import Entry, Index
from lazystore.codecs import CODECS_BY_ID, DELTA_CODEC_IDS, RAW, SEALED_CODEC_IDS, Codec, ContentDeltaPlanes, DeltaCodec
from lazystore.codecs.delta import word_size
from lazystore.errors import ChecksumError, EncryptionKeyError, FormatError
from lazystore.sources import ByteSource
from lazystore.views.sealed_chunks import open_sealed

# Consecutive raw chunks are read with one call of up to this many bytes, so
# a big raw tensor is a few large preads (split for parallelism), not
# thousands of small ones.
RAW_RUN_BYTES = 16 << 20
# Chunks fetched from an unmapped source are consumed a batch of about this
# many bytes at a time: loading many tensors holds at most one batch of
# fetched bytes beside the arrays being filled.
FETCH_BATCH_BYTES = 64 << 20
# get_slice of a tensor that cannot be viewed in place decodes about this
# many bytes of chunks at a time.
PART_BATCH_BYTES = 16 << 20
# Codec 3 decodes as codec 2: they differ in how the base is identified. The
# registry maps both delta ids to DeltaCodecs, the others to Codecs.
DELTA = cast(DeltaCodec, CODECS_BY_ID[2])
CONTENT_DELTA = ContentDeltaPlanes.id
# verify() of a mapped file checks tensors in pool tasks of about this many
# stored bytes (one task each for tensors at least this large); a verified
# load's checks of raw chunks are tasks of about this many bytes too.
VERIFY_BATCH_BYTES = 4 << 20


class ChunkReader:
    def __init__(self, source: ByteSource, index: Index, base=None, opener=None):
        self.source = source
        self.index = index
        # An encrypted file's chunk opener (lazystore._core.aead.Opener), or
        # None: opened without a key, or not encrypted.
        self.opener = opener
        # The file's bases (a base_chain.Bases) when it holds delta chunks:
        # their decoding starts from the base's bytes.
        self.base = base
        # Unmapped sources are fetched from (see the module's docstring).
        self.fetching = source.mapped() is None
        self.checked = index.checksums_known
        self.digests = index.digests  # checked instead of xxh3 by strong reads (format 1.4)
        self._first_chunks: np.ndarray | None = None  # see _chunk_starts

    def jobs(self, entry: Entry, chunk_ids, out: np.ndarray, verify_raw: bool, places=None, *,
             onto_base: bool = False, strong: bool = False) -> list:
        """What :meth:`run` needs to fill ``out`` with the given chunks: tasks
        for a mapped source, fetches for any other. Jobs of several tensors
        may be run together.

        ``places`` maps each chunk id to where its decoded bytes go in
        ``out`` (default: where they lie in the tensor); chunks with
        consecutive ids must lie back to back there too.

        ``onto_base``: ``out`` already holds the base's decoded bytes of the
        (delta) chunks, which are added onto them (see :meth:`add_deltas`).

        ``strong``: a verified read, which checks digests where the file has them."""
        if self.fetching:
            return self._fetches(entry, chunk_ids, out, places, onto_base, strong)
        return self.tasks(entry, chunk_ids, out, verify_raw, places, onto_base=onto_base, strong=strong)

    def run(self, jobs: list) -> None:
        if self.fetching:
            self._fetch_all(jobs)
        else:
            run_all(_call, jobs)

    def tasks(self, entry: Entry, chunk_ids, out: np.ndarray, verify_raw: bool, places=None, *,
              onto_base: bool = False, strong: bool = False) -> list:
        """Zero-argument callables that fill ``out`` (the tensor's decoded
        bytes as uint8) with the given chunks, in any order or thread.

        Compressed chunks are always checked against their checksum; raw ones
        only when ``verify_raw``."""
        ids = np.asarray(chunk_ids, dtype=np.int64).tolist()
        decoded_at = entry.decoded_offsets()
        places = decoded_at if places is None else places
        self._require_key(entry)
        if entry.codec == RAW.id:
            return [partial(self._read_raw, entry, run, decoded_at[run[0]], places[run[0]], out, verify_raw, strong)
                    for run in _raw_runs(ids, entry.decoded)]
        stored_at = entry.chunk_offsets()
        use = partial(self._apply if onto_base else self._decode_chunk, strong=strong)
        return [partial(self._read_compressed, use, entry, c, stored_at[c], places[c], out, strong) for c in ids]

    def fill(self, entry: Entry, chunk_ids, out: np.ndarray, verify_raw: bool, places=None, *,
             strong: bool = False) -> None:
        self.run(self.jobs(entry, chunk_ids, out, verify_raw, places, strong=strong))

    def add_deltas(self, entry: Entry, chunk_ids, out: np.ndarray, places) -> None:
        """Turn ``out``, holding the decoded bytes of the base chunks of
        ``entry`` (a delta tensor) at ``places``, into the chunks' own: each
        delta chunk read, checked and added on. This never reads the base:
        :class:`~lazystore.views.base_chain.Bases` walks a chain with it,
        one file after another, with no recursion."""
        self.run(self.jobs(entry, chunk_ids, out, True, places, onto_base=True))

    def read_box(self, entry: Entry, plan: SlicePlan, verify_raw: bool) -> np.ndarray:
        """The elements a selection picks, in its ascending box (see
        ``ChunkGrid.slice_plan``), decoding a batch of about
        ``PART_BATCH_BYTES`` of chunks at a time: memory holds the selection
        and one batch, never the whole tensor. ``verify_raw``: a verified
        read (``strong``)."""
        box = np.empty(plan.box_shape, entry.dtype)
        work = list(zip(plan.ids, plan.parts))
        for batch in batch_by_bytes(work, PART_BATCH_BYTES, lambda item: entry.decoded[item[0]]):
            ids = [c for c, _ in batch]
            places = dict(zip(ids, accumulate((entry.decoded[c] for c in ids[:-1]), initial=0)))
            buf = np.empty(places[ids[-1]] + entry.decoded[ids[-1]], np.uint8)
            self.fill(entry, ids, buf, verify_raw, places, strong=verify_raw)  # ids ascending: packed back to back
            for c, (dst, src) in batch:
                at = places[c]
                chunk = buf[at : at + entry.decoded[c]].view(entry.dtype).reshape(entry.grid.chunk_shape(c))
                box[dst] = chunk[src]
        return box

    def check_stored(self, entry: Entry, chunk_ids, *, decode: bool = False) -> None:
        """Raise ChecksumError unless the given stored chunks match (their
        digests, where the file has them: this is a verified read); with
        ``decode``, FormatError unless each compressed one also decodes."""
        stored_at = entry.chunk_offsets()
        for c in chunk_ids:
            start = stored_at[c]
            blob = self.source.read(start, start + entry.stored[c])
            self._check(blob, entry, c, True)
            if decode and entry.codec != RAW.id:
                self._decodes(entry, c, blob)

    def stored_ok(self, entry: Entry) -> bool:
        """Do all the tensor's stored chunks and its padding match the index,
        and does every compressed chunk decode?"""
        try:
            self.check_stored(entry, range(entry.chunk_count), decode=True)
        except FormatError:  # a ChecksumError, or bytes that match and still do not decode
            return False
        return all_zero(self.source.read(entry.data_offset + entry.stored_nbytes, entry.padding_end))

    def check_tasks(self, positions: range | list[int], mapping) -> list:
        """Zero-argument callables that raise ChecksumError unless the stored
        chunks of the raw tensors at ``positions`` in the index (their
        entries already validated) match, hashed in ``mapping`` (a map of
        the whole file): ``load`` hashes the private mapping its arrays
        view, so the pages it faults in are the ones handed out. Each task
        hashes about ``VERIFY_BATCH_BYTES``: many small tensors share one,
        a big tensor's chunks are spread over several. A file that records
        no checksums gets none.

        The chunks are laid out flat from the index's own arrays, with no
        Python call per tensor: a load of 100,000 tiny tensors pays for
        hashing them and little else."""
        if not self.checked or not len(positions):
            return []
        pos = np.fromiter(positions, np.int64, len(positions))
        table = self.index.entries
        counts = table["chunk_count"][pos].astype(np.int64)  # 0 for an empty tensor
        owner = np.repeat(pos, counts)
        first_of = np.repeat(np.cumsum(counts) - counts, counts)  # the flat place of each one's chunk 0
        local = np.arange(len(owner)) - first_of
        ids = self._chunk_starts()[owner] + local
        lengths = self.index.chunks["stored_nbytes"][ids].astype(np.int64)
        ends = np.cumsum(lengths)
        begins = ends - lengths
        # Raw chunks lie back to back from their tensor's data offset.
        starts = table["data_offset"][owner].astype(np.int64) + begins - begins[first_of]
        chunks = _FlatChunks(self.index, owner, local, starts, starts + lengths, ids)
        total = int(ends[-1]) if len(ends) else 0
        bounds = np.searchsorted(ends, np.arange(VERIFY_BATCH_BYTES, total, VERIFY_BATCH_BYTES), side="right")
        edges = [0, *dict.fromkeys(bounds.tolist()), len(ids)]
        return [partial(chunks.check, mapping, a, b) for a, b in zip(edges, edges[1:]) if b > a]

    def _chunk_starts(self) -> np.ndarray:
        """The index's number of each tensor's chunk 0 (made once per file)."""
        if self._first_chunks is None:
            counts = self.index.entries["chunk_count"].astype(np.int64)
            self._first_chunks = np.cumsum(counts) - counts
        return self._first_chunks

    def stored_ok_many(self, entries: list[Entry]) -> list[bool]:
        """:meth:`stored_ok` of each tensor; an unmapped source is fetched
        from once for all of them."""
        if self.digests is not None:
            self.digests.function()  # a digest this lazystore cannot check fails the call, not the tensors
        if not self.fetching:
            # One task per batch of small tensors: a pool task costs tens of
            # microseconds, more than checking a tiny tensor.
            batches = batch_by_bytes(entries, VERIFY_BATCH_BYTES, size=lambda entry: entry.stored_nbytes)
            return [ok for batch in run_all(self._stored_ok_batch, batches) for ok in batch]
        ok = [True] * len(entries)
        fetches = []
        for k, entry in enumerate(entries):
            # An empty tensor has no chunk, though chunk_offsets() gives it one offset.
            for c, start in zip(range(entry.chunk_count), entry.chunk_offsets()):
                fetches.append((start, start + entry.stored[c], partial(self._note_checksum, ok, k, entry, c, start)))
            padding = entry.data_offset + entry.stored_nbytes
            fetches.append((padding, entry.padding_end, partial(self._note_zeros, ok, k, padding)))
        self._fetch_all(fetches)
        return ok

    def _stored_ok_batch(self, entries: list[Entry]) -> list[bool]:
        return [self.stored_ok(entry) for entry in entries]

    # -- tasks ---------------------------------------------------------------

    def _check(self, data, entry: Entry, c: int, strong: bool = False) -> None:
        """Raise ChecksumError unless ``data`` matches chunk ``c``'s checksum
        (DigestError unless its digest, when ``strong`` in a file with
        digests); a file that records no checksums
        (``index.checksums_known`` false) has nothing to check against."""
        if strong and self.digests is not None:
            self.digests.check(data, entry.first_chunk + c, _what(entry, c))
        elif self.checked:
            check(data, int(self.index.chunks["checksum"][entry.first_chunk + c]), _what(entry, c))

    def _read_raw(self, entry: Entry, run: list[int], start: int, place: int, out, verify, strong) -> None:
        """Read a run of consecutive raw chunks, which start ``start`` bytes
        into the tensor, into ``out`` at ``place``."""
        target = out[place : place + sum(entry.decoded[c] for c in run)]
        # Raw chunks are stored as decoded, back to back from the data offset.
        self.source.read_into(entry.data_offset + start, target)
        if verify:
            lo = 0
            for c in run:
                self._check(target[lo : lo + entry.decoded[c]], entry, c, strong)
                lo += entry.decoded[c]

    def _read_compressed(self, use, entry: Entry, c: int, stored_at: int, decoded_at: int, out, strong) -> None:
        blob = self.source.read(stored_at, stored_at + entry.stored[c])
        self._check(blob, entry, c, strong)
        use(entry, c, decoded_at, out, blob)

    def _decode_chunk(self, entry: Entry, c: int, decoded_at: int, out, blob, *, strong: bool = False) -> None:
        """Decode chunk ``c`` (already checked) into place in ``out``."""
        if entry.codec in DELTA_CODEC_IDS:
            # The base's bytes first (a BaseCheckpointError names the base), then the difference.
            self.base.fill(entry, [c], out[decoded_at : decoded_at + entry.decoded[c]], {c: 0})
        self._apply(entry, c, decoded_at, out, blob, strong=strong)

    def _apply(self, entry: Entry, c: int, decoded_at: int, out, blob, *, strong: bool = False) -> None:
        """Decode chunk ``c`` (checked) into place in ``out``; a delta chunk
        onto the base's bytes already there, a codec-3 one once they are
        found to be the content it was coded against."""
        target = out[decoded_at : decoded_at + entry.decoded[c]]
        if entry.codec == CONTENT_DELTA:
            self.check_base_content(entry, c, target, strong)
        self._decode_onto(entry, c, target, blob)

    def check_base_content(self, entry: Entry, c: int, base_bytes, strong: bool = False) -> None:
        """BaseCheckpointError naming the base unless ``base_bytes``, the
        base's decoded chunk ``c`` of codec-3 ``entry``, hash to what the
        chunk was coded against (format 1.3): the base is identified by its
        content, so one rewritten with the same content stays valid. A
        ``strong`` check in a file with digests compares the base digest (G3)."""
        if strong and self.digests is not None:
            mismatch = self.digests.base_mismatch(base_bytes, entry.first_chunk + c)
            if mismatch is not None:
                raise self.base.changed_digest(_what(entry, c), self.digests.algorithm, *mismatch)
            return
        base_checksums = self.index.base_checksums
        assert base_checksums is not None  # a codec-3 entry's file records them: rule C5 refuses one that does not
        expected = int(base_checksums[entry.first_chunk + c])
        actual = digest(base_bytes)
        if actual != expected:
            raise self.base.changed(f"tensor {entry.name!r} chunk {c}", expected, actual)

    def check_bases_content(self, entry: Entry) -> None:
        """:meth:`check_base_content` of every chunk of codec-3 ``entry``
        (for verify): the base's chunks decoded a batch of about
        ``PART_BATCH_BYTES`` at a time, through its chain."""
        for ids in batch_by_bytes(range(entry.chunk_count), PART_BATCH_BYTES, lambda c: entry.decoded[c]):
            places = dict(zip(ids, accumulate((entry.decoded[c] for c in ids[:-1]), initial=0)))
            buf = np.empty(places[ids[-1]] + entry.decoded[ids[-1]], np.uint8)
            self.base.fill(entry, ids, buf, places)
            for c in ids:
                self.check_base_content(entry, c, buf[places[c] : places[c] + entry.decoded[c]], True)

    def _decodes(self, entry: Entry, c: int, blob) -> None:
        """Decode checked compressed chunk ``c`` into this thread's scratch
        memory, only to prove it decodes (FormatError if not). A delta
        chunk is decoded onto whatever the scratch holds: whether its bytes
        decode does not depend on the base's, whose own chunks are checked
        by the base's ``verify`` (see ``BaseLink.failing``). A sealed chunk
        read without the key is left at its checksum: only the key opens it."""
        if entry.codec in SEALED_CODEC_IDS and self.opener is None:
            return
        self._decode_onto(entry, c, scratch("verify decode", entry.decoded[c]), blob)

    def _decode_onto(self, entry: Entry, c: int, target, blob) -> None:
        """Decode checked chunk ``c`` into ``target``, which holds the base's
        decoded bytes of the chunk when it is a delta; a sealed one is
        opened (its tag checked) first."""
        if entry.codec in SEALED_CODEC_IDS:
            self._require_key(entry)
            open_sealed(self.opener, entry, c, target, blob)
            return
        try:
            if entry.codec in DELTA_CODEC_IDS:
                DELTA.add_into(blob, target, entry.planes, word_size(entry.dtype))
            else:
                codec = cast(Codec, CODECS_BY_ID[entry.codec])  # not a delta
                codec.decode_into(blob, target, entry.planes, dtype=entry.dtype)
        except FormatError as exc:
            raise FormatError(f"{_what(entry, c)}: {exc}") from None

    def _require_key(self, entry: Entry) -> None:
        """EncryptionKeyError naming a sealed tensor read without the key."""
        if self.opener is None and entry.codec in SEALED_CODEC_IDS:
            raise EncryptionKeyError(f"tensor {entry.name!r} of {self.source.name} is encrypted: open the file with "
                                     "encryption_key= to read it (its name, dtype and shape need no key)")

    # -- fetching from unmapped sources --------------------------------------------

    def _fetches(self, entry: Entry, chunk_ids, out: np.ndarray, places=None, onto_base: bool = False,
                 strong: bool = False) -> list:
        """``(start, stop, consume)`` for the chunks: ``consume(stored bytes)``
        checks them and puts their decoded bytes in place in ``out``."""
        stored_at = entry.chunk_offsets()
        decoded_at = entry.decoded_offsets() if places is None else places
        self._require_key(entry)
        use = self._take_raw if entry.codec == RAW.id else \
            partial(self._apply if onto_base else self._decode_chunk, strong=strong)
        # One range per chunk: the source groups neighbours into requests of
        # the size that suits it (see its read_many).
        return [(stored_at[c], stored_at[c] + entry.stored[c],
                 partial(self._use_fetched, use, entry, c, stored_at[c], decoded_at[c], out, strong))
                for c in np.asarray(chunk_ids, dtype=np.int64).tolist()]

    def _use_fetched(self, use, entry: Entry, c: int, stored_at: int, decoded_at: int, out, strong, blob) -> None:
        use(entry, c, decoded_at, out, self._intact(entry, c, stored_at, blob, strong))

    def _take_raw(self, entry: Entry, c: int, decoded_at: int, out, blob) -> None:
        out[decoded_at : decoded_at + len(blob)] = np.frombuffer(blob, dtype=np.uint8)

    def _intact(self, entry: Entry, c: int, stored_at: int, blob, strong: bool = False):
        """Chunk ``c``'s fetched bytes, checked. Bytes that fail their checksum
        may have been damaged on the way rather than in storage (a byte
        flipped in transit), so the chunk is fetched once more; only if it
        fails again is it damaged: ChecksumError, or RemoteError when the
        object is no longer the one opened."""
        try:
            self._check(blob, entry, c, strong)
            return blob
        except ChecksumError:
            blob = self.source.read(stored_at, stored_at + entry.stored[c])
        try:
            self._check(blob, entry, c, strong)
        except ChecksumError:
            self.source.check_unchanged()
            raise
        return blob

    def _note_checksum(self, ok: list, k: int, entry: Entry, c: int, stored_at: int, blob) -> None:
        try:
            blob = self._intact(entry, c, stored_at, blob, True)  # verify(): a verified read
            if entry.codec != RAW.id:
                self._decodes(entry, c, blob)
        except FormatError:  # as in stored_ok
            ok[k] = False

    def _note_zeros(self, ok: list, k: int, start: int, blob) -> None:
        # Fetched once more before it counts, as in _intact.
        if not all_zero(blob) and not all_zero(self.source.read(start, start + len(blob))):
            self.source.check_unchanged()
            ok[k] = False

    def _fetch_all(self, fetches: list) -> None:
        """Fetch every ``(start, stop, consume)`` a batch at a time (in file
        order, so neighbours share requests) and consume each in parallel."""
        batch, size = [], 0
        for fetch in sorted(fetches, key=lambda f: f[0]):
            batch.append(fetch)
            size += fetch[1] - fetch[0]
            if size >= FETCH_BATCH_BYTES:
                self._fetch_batch(batch)
                batch, size = [], 0
        if batch:
            self._fetch_batch(batch)

    def _fetch_batch(self, batch: list) -> None:
        wanted = [(a, b) for a, b, _ in batch if b > a]
        blobs = iter(self.source.read_many(wanted))
        pairs = [(consume, next(blobs) if b > a else memoryview(b"")) for a, b, consume in batch]
        run_all(_consume, pairs)


def _what(entry: Entry, c: int) -> str:
    return f"tensor {entry.name!r} chunk {c}"


class _FlatChunks:
    """The chunks of many raw tensors as flat arrays (see
    ``ChunkReader.check_tasks``): each one's tensor (its position in
    ``index``), its chunk number there, its stored range and its number in
    the index (whose record gives its checksum, or digest)."""

    __slots__ = ("checksums", "ids", "index", "local", "owner", "starts", "stops")

    def __init__(self, index: Index, owner, local, starts, stops, ids):
        self.index, self.owner, self.local = index, owner, local
        self.starts, self.stops, self.ids = starts, stops, ids
        self.checksums = index.chunks["checksum"][ids]

    def check(self, mapping, a: int, b: int) -> None:
        """Raise ChecksumError unless chunks ``a`` to ``b`` match, hashed in
        ``mapping`` (DigestError unless their digests, in a file with them)."""
        # Sliced and hashed by C-level maps: no Python bytecode per chunk.
        ranges = map(slice, self.starts[a:b].tolist(), self.stops[a:b].tolist())
        digests = self.index.digests
        if digests is not None:
            first = digests.first_mismatch(map(mapping.__getitem__, ranges), self.ids[a:b])
            if first is not None:
                i = a + first
                digests.check(mapping[int(self.starts[i]) : int(self.stops[i])], int(self.ids[i]),
                              _what(self.index.entry(int(self.owner[i])), int(self.local[i])))  # raises, naming it
            return
        actual = np.fromiter(map(digest, map(mapping.__getitem__, ranges)), np.uint64, b - a)
        bad = np.flatnonzero(actual != self.checksums[a:b])
        if len(bad):
            i = a + int(bad[0])
            entry = self.index.entry(int(self.owner[i]))
            check(mapping[int(self.starts[i]) : int(self.stops[i])], int(self.checksums[i]),
                  _what(entry, int(self.local[i])))  # raises, naming it


def _call(task) -> None:
    task()


def _consume(pair) -> None:
    consume, blob = pair
    consume(blob)


def _raw_runs(ids: list[int], lengths: Sequence[int]) -> list[list[int]]:
    """Group consecutive chunk ids into runs of at most RAW_RUN_BYTES."""
    runs: list[list[int]] = []
    size = 0
    for c in ids:
        n = lengths[c]
        if runs and runs[-1][-1] == c - 1 and size + n <= RAW_RUN_BYTES:
            runs[-1].append(c)
            size += n
        else:
            runs.append([c])
            size = n
    return runs
