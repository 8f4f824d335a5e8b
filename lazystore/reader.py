"""Reading chunks: fetch stored bytes, check them, decode into place.

Every way of reading (``ck[name]``, ``get_slice``, ``load``, ``verify``)
goes through ChunkReader, so checksum and decode rules live in one place.
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


class ChunkReader:
    def __init__(self, source: ByteSource, index: Index):
        self.source = source
        self.index = index

    def tasks(self, pos: int, chunk_ids, out: np.ndarray, verify_raw: bool) -> list:
        """Zero-argument callables that fill ``out`` (the tensor's decoded
        bytes as uint8) with the given chunks, in any order or thread.

        Compressed chunks are always checked against their checksum; raw ones
        only when ``verify_raw``."""
        idx = self.index
        first, last = idx.chunk_range(pos)
        lengths = idx.chunk_raw[first:last]
        offsets = np.cumsum(lengths) - lengths
        codec = CODECS_BY_ID[int(idx.entries["codec"][pos])]
        ids = np.asarray(chunk_ids, dtype=np.int64).tolist()
        if codec is RAW:
            runs = _raw_runs(ids, lengths)
            return [partial(self._read_raw, pos, first, run, offsets, out, verify_raw) for run in runs]
        planes = int(idx.entries["planes"][pos])
        return [
            partial(self._read_compressed, pos, first, c, int(offsets[c]), int(lengths[c]), codec, planes, out)
            for c in ids
        ]

    def fill(self, pos: int, chunk_ids, out: np.ndarray, verify_raw: bool) -> None:
        run_all(_call, self.tasks(pos, chunk_ids, out, verify_raw))

    def check_stored(self, pos: int, chunk_ids) -> None:
        """Raise ChecksumError unless the given stored chunks match."""
        first, _ = self.index.chunk_range(pos)
        for c in chunk_ids:
            check(self._stored(first + int(c)), int(self.index.chunks["checksum"][first + int(c)]), self._what(pos, int(c)))

    def stored_ok(self, pos: int) -> bool:
        """Do all the tensor's stored chunks and its padding match the index?"""
        first, last = self.index.chunk_range(pos)
        try:
            self.check_stored(pos, range(last - first))
        except ChecksumError:
            return False
        pad_start, pad_end = self.index.padding_after(pos)
        return all_zero(self.source.read(pad_start, pad_end))

    # -- tasks ---------------------------------------------------------------

    def _stored(self, chunk: int):
        start = int(self.index.chunk_offsets[chunk])
        return self.source.read(start, start + int(self.index.chunks["stored_nbytes"][chunk]))

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
                check(chunk, int(idx.chunks["checksum"][first + c]), self._what(pos, c))

    def _read_compressed(self, pos, first, c, raw_offset, raw_len, codec, planes, out) -> None:
        blob = self._stored(first + c)
        check(blob, int(self.index.chunks["checksum"][first + c]), self._what(pos, c))
        try:
            codec.decode_into(blob, out[raw_offset : raw_offset + raw_len], planes)
        except FormatError as exc:
            raise FormatError(f"{self._what(pos, c)}: {exc}") from None


def _call(task) -> None:
    task()


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
