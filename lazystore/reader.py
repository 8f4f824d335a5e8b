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

A foreign file without checksums (``Index.checksums_known`` false: a
safetensors file lazystore did not write) is read the same way with the
checks skipped; ``CheckpointView.verify`` refuses to run on it.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .checksum import all_zero, check
from .codecs import CODECS_BY_ID, RAW
from .errors import ChecksumError, FormatError
from .index import Index
from .parallel import run_all
from .sources import ByteSource

# Consecutive raw chunks are read with one call of up to this many bytes, so
# a big raw tensor is a few large preads (split for parallelism), not
# thousands of small ones.
RAW_RUN_BYTES = 16 << 20
# Chunks fetched from an unmapped source are consumed a batch of about this
# many bytes at a time: loading many tensors holds at most one batch of
# fetched bytes beside the arrays being filled.
FETCH_BATCH_BYTES = 64 << 20


class ChunkReader:
    def __init__(self, source: ByteSource, index: Index):
        self.source = source
        self.index = index
        # Unmapped sources are fetched from (see the module's docstring).
        self.fetching = source.mapped() is None
        self.checked = index.checksums_known

    def jobs(self, pos: int, chunk_ids, out: np.ndarray, verify_raw: bool) -> list:
        """What :meth:`run` needs to fill ``out`` with the given chunks: tasks
        for a mapped source, fetches for any other. Jobs of several tensors
        may be run together."""
        if self.fetching:
            return self._fetches(pos, chunk_ids, out)
        return self.tasks(pos, chunk_ids, out, verify_raw)

    def run(self, jobs: list) -> None:
        if self.fetching:
            self._fetch_all(jobs)
        else:
            run_all(_call, jobs)

    def tasks(self, pos: int, chunk_ids, out: np.ndarray, verify_raw: bool) -> list:
        """Zero-argument callables that fill ``out`` (the tensor's decoded
        bytes as uint8) with the given chunks, in any order or thread.

        Compressed chunks are always checked against their checksum; raw ones
        only when ``verify_raw``."""
        first, lengths, offsets, codec, planes = self._layout(pos)
        ids = np.asarray(chunk_ids, dtype=np.int64).tolist()
        if codec is RAW:
            runs = _raw_runs(ids, lengths)
            return [partial(self._read_raw, pos, first, run, offsets, out, verify_raw) for run in runs]
        return [
            partial(self._read_compressed, pos, first, c, int(offsets[c]), int(lengths[c]), codec, planes, out)
            for c in ids
        ]

    def _layout(self, pos: int):
        """A tensor's first chunk id, its chunks' decoded lengths and offsets
        within the tensor, its codec and byte-plane count."""
        idx = self.index
        first, last = idx.chunk_range(pos)
        lengths = idx.chunk_raw[first:last]
        offsets = np.cumsum(lengths) - lengths
        return first, lengths, offsets, CODECS_BY_ID[int(idx.entries["codec"][pos])], int(idx.entries["planes"][pos])

    def fill(self, pos: int, chunk_ids, out: np.ndarray, verify_raw: bool) -> None:
        self.run(self.jobs(pos, chunk_ids, out, verify_raw))

    def check_stored(self, pos: int, chunk_ids) -> None:
        """Raise ChecksumError unless the given stored chunks match."""
        first, _ = self.index.chunk_range(pos)
        for c in chunk_ids:
            self._check(self._stored(first + int(c)), first + int(c), pos, int(c))

    def stored_ok(self, pos: int) -> bool:
        """Do all the tensor's stored chunks and its padding match the index?"""
        first, last = self.index.chunk_range(pos)
        try:
            self.check_stored(pos, range(last - first))
        except ChecksumError:
            return False
        pad_start, pad_end = self.index.padding_after(pos)
        return all_zero(self.source.read(pad_start, pad_end))

    def stored_ok_many(self, positions: list[int]) -> list[bool]:
        """:meth:`stored_ok` of each tensor; an unmapped source is fetched
        from once for all of them."""
        if not self.fetching:
            return run_all(self.stored_ok, positions)
        idx = self.index
        ok = [True] * len(positions)
        fetches = []
        for k, pos in enumerate(positions):
            first, last = idx.chunk_range(pos)
            for c in range(last - first):
                start = int(idx.chunk_offsets[first + c])
                stop = start + int(idx.chunks["stored_nbytes"][first + c])
                fetches.append((start, stop, partial(self._note_checksum, ok, k, pos, c)))
            pad_start, pad_end = idx.padding_after(pos)
            fetches.append((pad_start, pad_end, partial(self._note_zeros, ok, k)))
        self._fetch_all(fetches)
        return ok

    # -- tasks ---------------------------------------------------------------

    def _stored(self, chunk: int):
        start = int(self.index.chunk_offsets[chunk])
        return self.source.read(start, start + int(self.index.chunks["stored_nbytes"][chunk]))

    def _check(self, data, chunk: int, pos: int, local_chunk: int) -> None:
        """Raise ChecksumError unless ``data`` matches its chunk's checksum;
        a file that records no checksums (``index.checksums_known`` false)
        has nothing to check against."""
        if self.checked:
            check(data, int(self.index.chunks["checksum"][chunk]), self._what(pos, local_chunk))

    def _what(self, pos: int, local_chunk: int) -> str:
        return f"tensor {self.index.names[pos]!r} chunk {local_chunk}"

    def _read_raw(self, pos, first, run, offsets, out, verify) -> None:
        idx = self.index
        start = int(offsets[run[0]])
        end = int(offsets[run[-1]]) + int(idx.chunk_raw[first + run[-1]])
        target = out[start:end]
        self.source.read_into(int(idx.chunk_offsets[first + run[0]]), target)
        if verify:
            for c in run:
                lo = int(offsets[c]) - start
                chunk = target[lo : lo + int(idx.chunk_raw[first + c])]
                self._check(chunk, first + c, pos, c)

    def _read_compressed(self, pos, first, c, raw_offset, raw_len, codec, planes, out) -> None:
        self._decode_chunk(pos, first, c, raw_offset, raw_len, codec, planes, out, self._stored(first + c))

    def _decode_chunk(self, pos, first, c, raw_offset, raw_len, codec, planes, out, blob) -> None:
        self._check(blob, first + c, pos, c)
        try:
            codec.decode_into(blob, out[raw_offset : raw_offset + raw_len], planes)
        except FormatError as exc:
            raise FormatError(f"{self._what(pos, c)}: {exc}") from None

    # -- fetching from unmapped sources --------------------------------------------

    def _fetches(self, pos: int, chunk_ids, out: np.ndarray) -> list:
        """``(start, stop, consume)`` for the chunks: ``consume(stored bytes)``
        checks them and puts their decoded bytes in place in ``out``."""
        idx = self.index
        first, lengths, offsets, codec, planes = self._layout(pos)
        # One range per chunk: the source groups neighbours into requests of
        # the size that suits it (see its read_many).
        fetches = []
        for c in np.asarray(chunk_ids, dtype=np.int64).tolist():
            start = int(idx.chunk_offsets[first + c])
            stop = start + int(idx.chunks["stored_nbytes"][first + c])
            if codec is RAW:
                consume = partial(self._take_raw, pos, first, c, int(offsets[c]), out)
            else:
                consume = partial(self._decode_chunk, pos, first, c, int(offsets[c]), int(lengths[c]), codec,
                                  planes, out)
            fetches.append((start, stop, consume))
        return fetches

    def _take_raw(self, pos, first, c, raw_offset, out, blob) -> None:
        self._check(blob, first + c, pos, c)
        out[raw_offset : raw_offset + len(blob)] = np.frombuffer(blob, dtype=np.uint8)

    def _note_checksum(self, ok: list, k: int, pos: int, c: int, blob) -> None:
        first, _ = self.index.chunk_range(pos)
        try:
            self._check(blob, first + c, pos, c)
        except ChecksumError:
            ok[k] = False

    def _note_zeros(self, ok: list, k: int, blob) -> None:
        if not all_zero(blob):
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


def _call(task) -> None:
    task()


def _consume(pair) -> None:
    consume, blob = pair
    consume(blob)


def _raw_runs(ids: list[int], lengths: np.ndarray) -> list[list[int]]:
    """Group consecutive chunk ids into runs of at most RAW_RUN_BYTES."""
    runs: list[list[int]] = []
    size = 0
    for c in ids:
        n = int(lengths[c])
        if runs and runs[-1][-1] == c - 1 and size + n <= RAW_RUN_BYTES:
            runs[-1].append(c)
            size += n
        else:
            runs.append([c])
            size = n
    return runs
