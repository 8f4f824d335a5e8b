"""CheckpointView: a read-only Mapping of tensor names to arrays.

Opening reads only the index. Data is read when asked for:

- ``ck[name]`` of a raw tensor in a local file is a read-only numpy view of
  the memory-mapped file: it never copies. Of a compressed tensor it is a
  new array decoded from the tensor's chunks (each checked on decode).
- ``ck.get_slice(name)[index]`` reads only the chunks the index touches.

A checkpoint in remote storage (any fsspec URL but ``file://``) is read the
same way, with range requests: see :class:`~lazystore.sources.fsspec.FsspecSource`.
"""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Iterable, Iterator, Mapping
from functools import partial

import numpy as np

from lazystore.codecs import RAW
from lazystore.errors import ClosedError, InvalidInputError, TensorNotFoundError, VerificationUnavailableError
from lazystore._native.index import Entry, TensorInfo
from lazystore._native.locate import read_index
from lazystore._core.parallel import run_all
from lazystore.views.chunk_reader import ChunkReader
from lazystore._core.slicing import selection
from lazystore.sources import ByteSource, open_source
from lazystore.views.base import ViewBase


class CheckpointView(ViewBase):
    """Lazy, dict-like access to the tensors of one checkpoint.

    Use as a context manager, or call :meth:`close`. Arrays already handed
    out stay valid after closing.
    """

    def __init__(self, source: ByteSource, *, verify: bool = False, index_reader=read_index):
        """``index_reader(source)`` gives the source's validated
        :class:`~lazystore.index.Index` and format version: lazystore's own
        by default, another format's parser for foreign files (see
        :mod:`lazystore.interop`). Nothing after it depends on the format."""
        self._source = source
        try:
            self._index, self.format_version = index_reader(source)
        except BaseException:
            source.close()
            raise
        # Names to positions: the index's KeyTable, or a dict for a selection.
        self._positions: Mapping[str, int] = self._index.keys
        self._verify_on_access = verify
        if verify:
            self._verified: set[int] = set()  # global ids of raw chunks already checked
            self._lock = threading.Lock()
        self._owns_source = True
        self._closed = False

    @property
    def _reader(self) -> ChunkReader:
        # Made on first use: a zero-copy read of a raw tensor never needs one.
        reader = self.__dict__.get("_chunk_reader")
        if reader is None:
            reader = self._chunk_reader = ChunkReader(self._source, self._index)
        return reader

    @classmethod
    def open(cls, path, *, verify: bool = False, storage_options=None) -> "CheckpointView":
        """Open a lazystore file at a local path or ``file://`` URL
        (memory-mapped), or any other fsspec URL (read with range requests;
        ``storage_options`` configure its filesystem). :func:`lazystore.open`
        also reads other formats."""
        return cls(open_source(path, storage_options), verify=verify)

    @property
    def format(self) -> str:
        """The format of the file: "lazystore" or "safetensors"."""
        return self._index.kind

    # -- Mapping -------------------------------------------------------------

    def __getitem__(self, name: str) -> np.ndarray:
        """The whole tensor. Raw, local: a read-only view of the mapped file
        (no copy). Otherwise: a new array, decoded and checked."""
        entry = self._entry(name)
        raw_view = self._mapped_raw(entry)
        if raw_view is not None:
            return raw_view
        return self._decode(entry, None)

    def __iter__(self) -> Iterator[str]:
        self._check_open()
        return iter(self._positions)

    def __len__(self) -> int:
        self._check_open()
        return len(self._positions)

    def __contains__(self, name) -> bool:
        self._check_open()
        return name in self._positions

    # -- the rest of the API ---------------------------------------------------

    @property
    def metadata(self) -> dict:
        """The JSON metadata given at save time (the same dict on every access)."""
        self._check_open()
        return self._index.metadata

    @property
    def system_metadata(self) -> dict:
        """lazystore's own metadata entries (keys starting with ``__lazystore``),
        such as the nested structure of a training checkpoint."""
        self._check_open()
        return self._index.system_metadata

    def info(self, name: str) -> TensorInfo:
        """dtype, shape, sizes and codec of a tensor, without reading its data."""
        return self._entry(name).info()

    def get_slice(self, name: str) -> "TensorSlice":
        """A handle whose ``[index]`` reads only what basic indexing needs."""
        return TensorSlice(self, self._entry(name))

    def select(self, keys_or_glob) -> "CheckpointView":
        """A view of some tensors: a glob pattern (str) or an iterable of names.

        The selection shares this view's file, which the parent owns: closing
        the parent closes the selection too; closing the selection alone
        leaves the parent open.
        """
        self._check_open()
        names = self._resolve(keys_or_glob)
        sub = object.__new__(CheckpointView)
        sub.__dict__.update(self.__dict__)
        sub._positions = {n: self._positions[n] for n in names}
        sub._owns_source = False
        return sub

    def verify(self, keys=None) -> list[str]:
        """Names of tensors whose stored bytes or padding fail their checks.

        ``[]`` means intact. With ``keys=None`` every tensor is checked, and
        so is the preamble (a bad preamble raises FormatError). A file that
        records no checksums (a safetensors file lazystore did not write)
        raises VerificationUnavailableError.
        """
        self._check_open()
        if not self._index.checksums_known:
            raise VerificationUnavailableError(
                f"cannot verify {self._source.name}: {self._index.unverifiable or 'it records no checksums'}")
        names = list(self._positions) if keys is None else self._resolve(keys)
        if keys is None:
            self._index.check_head(self._source, self.format_version)
        ok = self._reader.stored_ok_many(self._index.entries_of(self._positions[n] for n in names))
        return [n for n, good in zip(names, ok) if not good]

    def load(self, keys=None, *, verify: bool = False) -> dict[str, np.ndarray]:
        """Writable arrays of some or all tensors.

        From a local file, raw tensors are views of a private copy-on-write
        mapping: nothing is copied up front, pages are read on first touch,
        and writing to an array copies just the pages written, never
        changing the file. Compressed tensors (and every tensor from a
        source that cannot be mapped) are decoded into new arrays, in
        parallel. ``verify`` checks raw tensors' checksums too (always done
        for sources that are not mapped). From remote storage the chunks
        of all the tensors are fetched together: neighbouring ranges merged,
        requests sent concurrently.
        """
        self._check_open()
        names = list(self._positions) if keys is None else self._resolve(keys)
        verify = verify or self._verify_on_access
        private = None
        outputs, tasks, jobs = {}, [], []
        for name, entry in zip(names, self._index.entries_of(self._positions[n] for n in names)):
            if entry.codec == RAW.id:
                if private is None:
                    private = self._source.private_mapping() or False
                if private:
                    if verify:
                        tasks.append(partial(self._reader.check_stored, entry, range(entry.chunk_count)))
                    data = np.frombuffer(private, dtype=np.uint8, count=entry.nbytes, offset=entry.data_offset)
                    outputs[name] = (data, entry)
                    continue
            buf = np.empty(entry.nbytes, dtype=np.uint8)
            jobs += self._reader.jobs(entry, range(entry.chunk_count), buf, verify)
            outputs[name] = (buf, entry)
        if self._reader.fetching:
            run_all(lambda t: t(), tasks)
            self._reader.run(jobs)
        else:
            run_all(lambda t: t(), tasks + jobs)  # jobs are tasks too for a mapped source
        return {n: _as_tensor(buf, entry) for n, (buf, entry) in outputs.items()}

    @property
    def nbytes(self) -> int:
        """Decoded size of the tensors in this view."""
        return sum(e.nbytes for e in self._index.entries_of(self._positions.values()))

    @property
    def stored_nbytes(self) -> int:
        """Bytes the tensors of this view occupy in the file."""
        return sum(e.stored_nbytes for e in self._index.entries_of(self._positions.values()))

    def close(self) -> None:
        if self._owns_source and not self._closed:
            self._source.close()
        self._closed = True

    def __enter__(self) -> "CheckpointView":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed or self._source.closed else f"{len(self._positions)} tensors"
        return f"<CheckpointView {self._source.name!r}: {state}>"

    # -- internals ---------------------------------------------------------------

    def _check_open(self) -> None:
        # A selection shares its parent's source, so the parent closing it counts.
        if self._closed or self._source.closed:
            raise ClosedError(f"checkpoint {self._source.name!r} is closed")

    def _pos(self, name: str) -> int:
        self._check_open()
        try:
            return self._positions[name]
        except (KeyError, TypeError):
            raise TensorNotFoundError(f"no tensor named {name!r} in {self._source.name}") from None

    def _resolve(self, keys_or_glob) -> list[str]:
        if isinstance(keys_or_glob, str):
            return [n for n in self._positions if fnmatch.fnmatchcase(n, keys_or_glob)]
        if not isinstance(keys_or_glob, Iterable):
            raise InvalidInputError(f"expected a glob pattern or an iterable of names, got {keys_or_glob!r}")
        names = list(keys_or_glob)
        for n in names:
            self._pos(n)
        return names

    def _entry(self, name: str) -> Entry:
        return self._index.entry(self._pos(name))

    def _mapped_raw(self, entry: Entry, chunk_ids=None) -> np.ndarray | None:
        """The zero-copy view of a raw tensor in a mapped file, or None when
        the tensor is compressed or the source is not mapped. When this view
        verifies on access, the chunks about to be used (all when None) are
        checked first, each once."""
        mapped = self._source.mapped()
        if mapped is None or entry.codec != RAW.id:
            return None
        if self._verify_on_access:
            first = entry.first_chunk
            ids = range(entry.chunk_count) if chunk_ids is None else chunk_ids
            todo = [int(c) for c in ids if first + int(c) not in self._verified]
            self._reader.check_stored(entry, todo)
            with self._lock:
                self._verified.update(first + c for c in todo)
        # One numpy call builds the read-only view straight from the map.
        return np.ndarray(entry.shape, entry.dtype, buffer=mapped, offset=entry.data_offset)

    def _decode(self, entry: Entry, chunk_ids) -> np.ndarray:
        """Decode chunks (all when None) into a tensor-sized buffer.

        The buffer is allocated but only the decoded chunks are written, so
        untouched pages of a large tensor never become resident."""
        if chunk_ids is None:
            chunk_ids = range(entry.chunk_count)
        buf = np.empty(entry.nbytes, dtype=np.uint8)
        self._reader.fill(entry, chunk_ids, buf, self._verify_on_access)
        return _as_tensor(buf, entry)


def _as_tensor(buf: np.ndarray, entry: Entry) -> np.ndarray:
    """A tensor's decoded bytes (uint8) as the tensor."""
    return buf.view(entry.dtype).reshape(entry.shape)


class TensorSlice:
    """``ck.get_slice(name)``: index it like a numpy array to read part of a tensor.

    Raw tensors in a local file give a read-only view (no copy); compressed
    ones decode only the chunks the index touches and return a new array.
    """

    def __init__(self, view: CheckpointView, entry: Entry):
        self._view = view
        self._entry = entry
        self.shape = entry.shape
        self.dtype = entry.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def get_shape(self) -> list[int]:  # safetensors' spelling
        return list(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, index):
        view, entry = self._view, self._entry
        view._check_open()
        picks = selection(index, self.shape)
        chunk_ids = entry.grid.chunks_for(picks)
        raw_view = view._mapped_raw(entry, chunk_ids)
        if raw_view is not None:
            return raw_view[index]
        result = view._decode(entry, chunk_ids)[index]
        # Copy so the tensor-sized decode buffer is released with this call.
        return result.copy() if isinstance(result, np.ndarray) else result

    def __repr__(self) -> str:
        return f"<TensorSlice {self._entry.name!r} {self.dtype} {self.shape}>"

