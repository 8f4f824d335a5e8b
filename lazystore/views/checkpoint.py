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

import threading
from collections.abc import Callable, Iterator
from functools import partial
from typing import cast

import numpy as np

from lazystore._core.aead import resolve_key
from lazystore._core.globs import Names
from lazystore._core.parallel import run_all
from lazystore._core.slicing import rebase
from lazystore._native.index import Entry, Index
from lazystore._native.locate import read_index
from lazystore._native.sealed_index import opener_for
from lazystore.codecs import CODECS_BY_ID, DELTA_CODEC_IDS, RAW, ContentDeltaPlanes
from lazystore.errors import VerificationUnavailableError
from lazystore.sources import ByteSource, LocalFile, open_beside
from lazystore.views.base import TensorInfo, TensorSlice, ViewBase
from lazystore.views.base_chain import Bases, Chain, Link
from lazystore.views.chunk_reader import ChunkReader

__all__ = ["CheckpointView", "TensorSlice"]
CONTENT_DELTA = ContentDeltaPlanes.id

RAW_ID = RAW.id
# What parses a source's index: its validated Index and format version.
IndexReader = Callable[[ByteSource], tuple[Index, tuple[int, int]]]


class _File:
    """One open file, shared by a view and its selections: the source, its
    validated index and format version, the chunk reader, and what
    verify-on-access has already checked."""

    __slots__ = ("_reader", "base", "in_place", "index", "lock", "opener", "source", "verified", "verify", "version")

    def __init__(self, source: ByteSource, index: Index, version: tuple, verify: bool, bases: Bases | None = None,
                 opener=None):
        self.source = source
        self.opener = opener  # an encrypted file's chunk opener (see ChunkReader), when opened with its key
        self.index = index
        self.version = version
        self.verify = verify
        # The mapped file raw tensors are viewed in with no check on access
        # (None: not mapped, or verifying on access).
        self.in_place = None if verify else source.mapped()
        if verify:
            self.verified: set[int] = set()  # global ids of raw chunks already checked
            self.lock = threading.Lock()
        self._reader: ChunkReader | None = None
        # A delta file's bases (see base_chain): a base's view reads through
        # the rest of the chain it is in; an opened file gets a chain of its
        # own, held from now on when the file is local.
        self.base = bases if index.base is not None else None
        if bases is None and index.base is not None:
            open_file = partial(_open_base_file, mmap=source.mapped() is not None)
            self.base = Bases(Chain(source.name, index.base, open_file, _base_view), owner=True)
            if isinstance(source, LocalFile):
                self.base.hold()

    @property
    def reader(self) -> ChunkReader:
        # Made on first use: a zero-copy read of a raw tensor never needs one.
        reader = self._reader
        if reader is None:
            reader = self._reader = ChunkReader(self.source, self.index, self.base, self.opener)
        return reader

    def delta_bases(self) -> Bases:
        """:attr:`base`, for a file known to hold delta tensors: such a
        file's index names its base (Index refuses one that does not), so
        it is never None there."""
        assert self.base is not None, "delta tensors in a file without a base"
        return self.base

    def close(self) -> None:
        self.source.close()
        if self.base is not None:
            self.base.close()


class CheckpointView(ViewBase):
    """Lazy, dict-like access to the tensors of one checkpoint file.

    Use as a context manager, or call :meth:`close`. Arrays already handed
    out stay valid after closing. The contract is :class:`ViewBase`'s.
    ``ls.open`` makes one; the source is closed if opening fails.

    Parameters
    ----------
    source : ByteSource
        The file's bytes (a mapped local file, a remote object, memory).
    verify : bool, optional
        Check every raw read on access. A file that records no checksums
        is then refused, as :meth:`verify` refuses it: reading it with
        nothing checked would not be what was asked for.
    index_reader : callable, optional
        ``index_reader(source)`` gives the source's validated
        :class:`~lazystore._native.index.Index` and format version:
        lazystore's own by default, another format's parser for foreign
        files (see :mod:`lazystore.interop`). Nothing after it depends on
        the format.
    encryption_key : bytes or callable, optional
        32 bytes, or a callable returning them, called once: opens an
        encrypted file's sealed tensors, after checking that it is the
        file's key and that the index is the one written.
    _bases : Bases, optional
        The chain of bases this file is read in, when it is itself a base
        (internal: a delta file's view opens its bases with it).

    Raises
    ------
    VerificationUnavailableError
        ``verify=True`` of a file that records no checksums.
    EncryptionKeyError
        A key that does not open the file (its key-check value differs), or
        a key for a file that is not encrypted.
    DecryptionError
        The encrypted file's index fails its MAC.
    FormatError
        The source is not a valid checkpoint.
    """

    def __init__(self, source: ByteSource, *, verify: bool = False,
                 index_reader: IndexReader = read_index,
                 encryption_key: bytes | Callable[[], bytes] | None = None, _bases: Bases | None = None) -> None:
        try:
            index, version = index_reader(source)
            if verify and not index.checksums_known:
                raise _unverifiable(source.name, index, "; open it without verify=True to read it unchecked")
            if verify and index.digests is not None:
                index.digests.function()  # chunk digests this lazystore cannot check: refused now, not on a read
            opener = opener_for(index.sealing, resolve_key(encryption_key), source.name)  # rule S6
        except BaseException:
            source.close()
            raise
        self._take(_File(source, index, version, verify, _bases, opener))
        # Names to positions: the index's KeyTable (or, once listed, its
        # dict: see __iter__), or a dict for a selection.
        self._table = index.keys
        self._whole = True  # of the whole file, not a selection

    def __iter__(self) -> Iterator[str]:
        names = super().__iter__()
        keys = self._file.index.keys
        if self._table is keys:
            # Listed, so checked for duplicates (rule K3): from now on the
            # names' plain dict serves lookups, one Python call fewer each.
            self._table = keys.positions
        return names

    def _take(self, file: _File) -> None:
        """Read ``file``, and say what the contract's attributes say of it
        (none of which changes while it is open)."""
        self._file = file
        self.name = file.source.name  # the path or URL of the file
        self.format = file.index.kind  # "lazystore" or "safetensors"
        self.format_version = file.version
        self._metadata = file.index.metadata
        self._system_metadata = file.index.system_metadata

    def _selection(self, table: dict) -> CheckpointView:
        sub = CheckpointView.__new__(CheckpointView)
        sub._take(self._file)
        sub._table = table
        sub._whole = False
        return sub

    def _release(self) -> None:
        self._file.in_place = None  # the source's map goes with the last array that uses it
        self._file.close()

    @property
    def base(self) -> str | None:
        """Where the base of a delta file (format 1.2 or 1.3) is, or None for other files.

        The file its delta tensors were coded against, beside it.
        """
        bases = self._file.base
        return None if bases is None else bases.path

    # -- reading -------------------------------------------------------------

    def __getitem__(self, name: str) -> np.ndarray:
        """The whole tensor. Raw, local: a read-only view of the mapped file
        (no copy). Otherwise: a new array, decoded and checked."""
        entry = self._file.index.entry(self._lookup(name))
        mapped, d = self._file.in_place, entry.described
        if mapped is not None and d.codec == RAW_ID:  # the common case, kept short: ck[name] in a loop
            return np.ndarray(d.shape, d.dtype, mapped, entry.data_offset)
        raw_view = self._mapped_raw(entry)
        if raw_view is not None:
            return raw_view
        return self._decode(entry)

    def info(self, name: str) -> TensorInfo:
        e = self._entry(name)
        return TensorInfo(e.name, e.dtype, e.shape, e.nbytes, e.stored_nbytes, CODECS_BY_ID[e.codec].name,
                          e.chunk_count, e.data_offset)

    def get_slice(self, name: str) -> TensorSlice:
        entry = self._entry(name)
        return TensorSlice(self, entry.name, entry.dtype, entry.shape, partial(self._read_part, entry))

    def verify(self, keys: Names | None = None) -> list[str]:
        """Names of tensors whose stored bytes or padding fail their checks.

        Every chunk is checked against its checksum, and every compressed
        chunk is also decoded (into scratch memory, a chunk at a time), so
        bytes that match their checksum yet do not decode are named too. A
        delta tensor's chunks are decoded on their own, and its base's
        tensor is verified in the base file, down the chain; a codec-3
        delta's base (format 1.3) is also decoded, to check it is the
        content the delta was coded against.

        Parameters
        ----------
        keys : str or iterable of str, optional
            A glob pattern (str) or the names to check; None (the default)
            checks every tensor, and the preamble too.

        Returns
        -------
        list of str
            The names of the tensors that fail; ``[]`` means intact.

        Raises
        ------
        VerificationUnavailableError
            The file records no checksums (a safetensors file lazystore did
            not write).
        FormatError
            A bad preamble (checked with ``keys=None``).
        BaseCheckpointError
            A codec-3 delta's base is not the content it was coded against.
        TensorNotFoundError
            An unknown name, or a glob that matches nothing.
        ClosedError
            The view is closed.
        """
        self._check_open()
        file = self._file
        index = file.index
        if not index.checksums_known:
            raise _unverifiable(self.name, index)
        names, entries = self._named_entries(keys)
        if keys is None:
            index.check_head(file.source, file.version)
        deltas = [e for e in entries if e.codec in DELTA_CODEC_IDS]
        for entry in deltas:  # decoding a chunk allocates what it claims: bound that first
            self._bound(entry)
        ok = file.reader.stored_ok_many(entries)
        failing = file.delta_bases().failing(deltas) if deltas else set()  # the chain below, to its keyframe
        bad = {n for n, good in zip(names, ok) if not good} | failing
        for entry in deltas:
            if entry.codec == CONTENT_DELTA and entry.name not in bad:  # its base's bytes, all checked
                file.reader.check_bases_content(entry)
        return [n for n in names if n in bad]

    def load(self, keys: Names | None = None, *, verify: bool = True) -> dict[str, np.ndarray]:
        """Writable arrays of some or all tensors, checked.

        Every tensor handed back has been checked against its checksums:
        compressed chunks as they are decoded, raw ones too unless
        ``verify=False`` (or the file records no checksums: a safetensors
        file lazystore did not write). A view opened with ``verify=True``
        always checks.

        From a local file, raw tensors are views of a private copy-on-write
        mapping: nothing is copied, and writing to an array copies just the
        pages written, never changing the file. Checking them hashes that
        mapping, which reads every page in (in parallel, sequentially within
        a task); with ``verify=False`` no data is read until touched.
        Compressed tensors (and every tensor from a source that cannot be
        mapped) are decoded into new arrays, in parallel. From remote
        storage the chunks of all the tensors are fetched together:
        neighbouring ranges merged, requests sent concurrently.

        Parameters
        ----------
        keys : str or iterable of str, optional
            A glob pattern (str) or the names to load; None (the default)
            loads every tensor.
        verify : bool, optional
            Check raw tensors against their checksums too (compressed ones
            always are).

        Returns
        -------
        dict of str to numpy.ndarray
            The arrays, in the order asked for.

        Raises
        ------
        ChecksumError
            A damaged chunk (the message names its tensor).
        TensorNotFoundError
            An unknown name, or a glob that matches nothing.
        ClosedError
            The view is closed.
        """
        names, positions = self._named_positions(keys)
        file = self._file
        entries = file.index.entries_of(positions)
        reader = file.reader
        verify = verify or file.verify
        private: memoryview | None = None  # the private mapping raw tensors are viewed in, asked for once
        asked = False
        # None holds a decoded tensor's place (the file's order) until it is decoded.
        outputs: dict[str, np.ndarray | None] = {}
        decoded, viewed, jobs = [], [], []
        ndarray = np.ndarray
        for name, pos, entry in zip(names, positions, entries):
            d = entry.described
            if d.codec == RAW_ID:
                if not asked:
                    private, asked = file.source.private_mapping(), True
                if private:
                    viewed.append(pos)
                    # One numpy call per tensor: a view of the private mapping.
                    outputs[name] = ndarray(d.shape, d.dtype, private, entry.data_offset)
                    continue
            self._bound(entry)
            buf = np.empty(entry.nbytes, dtype=np.uint8)
            jobs += reader.jobs(entry, range(entry.chunk_count), buf, verify, strong=verify)
            outputs[name] = None  # keeps the file's order
            decoded.append((name, buf, entry))
        if reader.fetching:  # nothing is viewed in place: every chunk is fetched (and checked)
            reader.run(jobs)
        else:
            checks = reader.check_tasks(viewed, private) if verify else []
            run_all(lambda t: t(), checks + jobs)  # jobs are tasks too for a mapped source
        for name, buf, entry in decoded:
            outputs[name] = _as_tensor(buf, entry)
        return cast(dict[str, np.ndarray], outputs)  # every place filled above

    @property
    def nbytes(self) -> int:
        """Decoded size of the tensors in this view."""
        return sum(e.nbytes for e in self._named_entries(None)[1])

    @property
    def stored_nbytes(self) -> int:
        """Bytes the tensors of this view occupy in the file."""
        return sum(e.stored_nbytes for e in self._named_entries(None)[1])

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._table)} tensors"
        return f"<CheckpointView {self.name!r}: {state}>"

    # -- internals ---------------------------------------------------------------

    def _entry(self, name: str) -> Entry:
        return self._file.index.entry(self._lookup(name))

    def _named_entries(self, keys) -> tuple[list[str], list[Entry]]:
        """The names ``keys`` asks for (as :meth:`_wanted`) and their entries,
        checked in bulk."""
        names, positions = self._named_positions(keys)
        return names, self._file.index.entries_of(positions)

    def _named_positions(self, keys) -> tuple[list[str], range | list[int]]:
        """The names ``keys`` asks for (as :meth:`_wanted`) and their positions in the index."""
        names = self._wanted(keys)
        if self._whole and keys is None:  # listed in index order: positions 0, 1, 2...
            return names, range(len(names))
        table = self._table
        return names, [table[n] for n in names]

    def _read_part(self, entry: Entry, index, picks: list[range]):
        """``get_slice(...)[index]``: only the chunks holding ``picks``."""
        raw_view = self._mapped_raw(entry, picks)
        if raw_view is not None:
            return raw_view[index]
        # Decoded chunk by chunk into a box the size of the selection, so a
        # slice of a tensor larger than memory is as cheap as the slice.
        self._bound(entry)
        box = self._file.reader.read_box(entry, entry.grid.slice_plan(picks), self._file.verify)
        return box[rebase(index)]

    def _mapped_raw(self, entry: Entry, picks: list[range] | None = None) -> np.ndarray | None:
        """The zero-copy view of a raw tensor in a mapped file, or None when
        the tensor is compressed or the source is not mapped. When this view
        verifies on access, the chunks holding ``picks`` (all when None) are
        checked first, each once."""
        file = self._file
        mapped = file.source.mapped()
        if mapped is None or entry.codec != RAW.id:
            return None
        if file.verify:
            first = entry.first_chunk
            ids = range(entry.chunk_count) if picks is None else entry.grid.chunks_for(picks)
            todo = [int(c) for c in ids if first + int(c) not in file.verified]
            file.reader.check_stored(entry, todo)
            with file.lock:
                file.verified.update(first + c for c in todo)
        # One numpy call builds the read-only view straight from the map.
        return np.ndarray(entry.shape, entry.dtype, buffer=mapped, offset=entry.data_offset)

    def _decode(self, entry: Entry) -> np.ndarray:
        """The whole tensor, decoded (and checked) into a new array."""
        self._bound(entry)
        buf = np.empty(entry.nbytes, dtype=np.uint8)
        self._file.reader.fill(entry, range(entry.chunk_count), buf, self._file.verify, strong=self._file.verify)
        return _as_tensor(buf, entry)

    def _bound(self, entry: Entry) -> None:
        """Before anything a delta tensor's size claims is allocated: its
        bases, down the chain, hold the same tensor (rule B2), so the size
        is that of a tensor a keyframe stores, which its file bounds (raw:
        by its bytes; compressed: by rule C3). BaseCheckpointError if not."""
        if entry.codec in DELTA_CODEC_IDS:
            self._file.delta_bases().plan(entry)


def _unverifiable(name: str, index: Index, hint: str = "") -> VerificationUnavailableError:
    """The error for verifying a file that records no checksums, by
    ``verify()`` or on access: nothing says what its bytes should be."""
    why = index.unverifiable or "it records no checksums"
    return VerificationUnavailableError(f"cannot verify {name}: {why}, so nothing says what its bytes "
                                        f"should be{hint}")


def _open_base_file(link: Link, *, mmap: bool) -> ByteSource:
    """A delta file's base, opened safely beside it (see
    lazystore.sources.safe_files). Mapped, it keeps no descriptor beyond
    its mapping's (none from Python 3.13): a chain of 64 bases is held by
    64 mappings."""
    return open_beside(link.of, link.ref.file, mmap=mmap, keep_fd=False)


def _base_view(source: ByteSource, below: Bases) -> CheckpointView:
    """A base as a view: a lazystore file (never another format), whose own
    deltas decode through ``below``."""
    return CheckpointView(source, _bases=below)


def _as_tensor(buf: np.ndarray, entry: Entry) -> np.ndarray:
    """A tensor's decoded bytes (uint8) as the tensor."""
    return buf.view(entry.dtype).reshape(entry.shape)
