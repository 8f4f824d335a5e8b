"""Streaming, atomic, durable writer.

Tensors are written as they are added, a window of chunks at a time, so
the writer holds at most one window (``WINDOW_BYTES``) of a tensor and its
encoded chunks in memory, whatever the tensor's size; the index goes last. Everything is
written to a hidden temporary file beside the target, fsync'd, renamed over
the target and the folder fsync'd: a reader sees the old file or the new
one, never a mix, and a failure or crash leaves any previous file intact.
A save to object storage streams into the store's upload instead, which
makes the object appear only when complete (see :mod:`lazystore.sinks`).
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import IO, Any

import numpy as np

from lazystore._core import crypto_digest, tensor_names
from lazystore._core.batching import batch_by_bytes
from lazystore._core.checksum import digest
from lazystore._core.chunking import DEFAULT_CHUNK_BYTES, ChunkGrid, choose_grid
from lazystore._core.dtypes import DtypeSpec, spec_for
from lazystore._core.parallel import run_all, start_all
from lazystore._core.rechunk import rechunk
from lazystore._native import layout as fmt
from lazystore._native.base_ref import BASE_KEY, CONTENT_DELTA_MINOR
from lazystore._native.entry_rules import size_problem
from lazystore.codecs import RAW, Codec, CodecBase, ZstdPlanes, codec_for
from lazystore.codecs.sealed import sealed_codec_of
from lazystore.errors import ClosedError, InvalidInputError
from lazystore.sinks import open_sink
from lazystore.writing.checks import check_metadata, check_options, check_user_metadata, encode_metadata, storable
from lazystore.writing.chunk_hashing import ChunkHashing
from lazystore.writing.delta_writer import DeltaBase
from lazystore.writing.interface import TensorWriter
from lazystore.writing.sealing import sealing_for

_DEFAULT = object()
# A compressed tensor must save at least this fraction, else it is stored raw
# and stays mmap-able: a 1% saving is not worth losing zero-copy reads.
MIN_SAVING = 0.01
# The writer encodes and holds at most this many bytes of a tensor at once
# (a window of whole chunks): larger tensors stream through.
WINDOW_BYTES = 32 << 20


class Writer(TensorWriter):
    """Write a checkpoint one tensor at a time.

    The file appears at ``path`` only when the ``with`` block (or
    :meth:`close`) completes; an exception inside the block removes the
    temporary file and leaves any existing ``path`` untouched. Every option
    is checked here, before anything is made.

    Parameters
    ----------
    path : str, os.PathLike or binary file object
        The file written. It may be an object-store URL (``s3://``,
        ``gs://``, ``az://``, and ``memory://``): the object appears when
        its upload completes, and an error cancels it.
    compression : str, Codec or None, optional
        The default codec: None (raw), "auto" (recommended: lazystore's
        codec per tensor, today "huffman" for floats and "zstd" for the
        rest), "zstd", "huffman" (float planes with a Huffman-coded
        exponent, format 1.5: tensors of other dtypes than float16,
        bfloat16, float32 and the 8-bit floats are stored as "zstd"), or a
        Codec; each :meth:`add` may override it.
    compression_level : int, optional
        The zstd level (None: tuned per dtype).
    metadata : Mapping, optional
        Any JSON object with str keys, none reserved for lazystore.
    alignment : int, optional
        Where each tensor's data starts: a power of two from 8 to 2**30.
    chunk_bytes : int, optional
        The target size of a chunk, in decoded bytes.
    storage_options : Mapping, optional
        Options of the URL's fsspec filesystem.
    base : str or os.PathLike, optional
        A local lazystore file in the same folder as ``path``: it makes the
        file a delta file (format 1.3), whose tensors the base holds with
        the same name, dtype and shape are coded against it (see
        :mod:`lazystore.writing.delta_writer`).
    digest : str, optional
        ``"blake3"`` or ``"sha256"``: a cryptographic digest of every chunk
        (format 1.4), which verified reads check instead of xxh3.
    encryption_key : bytes or callable, optional
        32 bytes, or a callable returning them, called once: encrypts every
        tensor's bytes with AES-256-GCM, chunk by chunk, and authenticates
        the index (format 1.4; see :mod:`lazystore.writing.sealing`). Names,
        dtypes, shapes and metadata stay readable without the key.
    _salt : bytes, optional
        A test hook (32 bytes) that makes an encrypted file reproducible;
        never use it otherwise.

    Raises
    ------
    InvalidInputError
        An unknown codec, a level zstd does not have, an alignment that is
        no power of two, metadata that is not a JSON object with str keys,
        an unknown digest, or a bad key or base.

    Examples
    --------
    >>> with Writer("model.lzy", compression="auto") as w:   # doctest: +SKIP
    ...     w.add("layer0.weight", array)
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | IO[bytes],
        *,
        compression: str | Codec | None = None,
        compression_level: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        alignment: int = fmt.DEFAULT_ALIGNMENT,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        storage_options: Mapping[str, Any] | None = None,
        base: str | os.PathLike[str] | None = None,
        digest: str | None = None,
        encryption_key: bytes | Callable[[], bytes] | None = None,
        _salt: bytes | None = None,
    ) -> None:
        codec, alignment, chunk_bytes = check_options(compression, compression_level, alignment, chunk_bytes)
        # Each chunk's xxh3, and its digest in a file with digests (format 1.4).
        self._hashing = ChunkHashing(crypto_digest.writer_digest(digest))
        self._sealing = sealing_for(encryption_key, _salt, base)  # None: plaintext
        self.path = path
        self.metadata = check_metadata(metadata)
        # lazystore's own entries (RESERVED_METADATA_PREFIX keys), set by
        # higher layers such as nested-state saving; written beside the user's.
        self.system_metadata: dict = {}
        self._codec = codec
        self._level = compression_level
        self._alignment = alignment
        self._chunk_bytes = chunk_bytes
        self._names: list[str] = []
        self._seen: set[str] = set()
        self._entries: list[tuple] = []
        self._dims: list[int] = []
        self._chunk_lengths: list[int] = []
        self._chunk_checksums: list[int] = []
        # Per chunk, the xxh3 of the base chunk it was coded against (0 for a
        # chunk that is no delta): written only in a file with delta tensors.
        self._base_checksums: list[int] = []
        # The file tensors may be coded against (format 1.3), opened before
        # the target so that a bad base leaves nothing behind.
        self._base = DeltaBase(base, path, compression_level, self._hashing.task) if base is not None else None
        # A sink dropped unfinished (with this writer) discards what it holds.
        try:
            self._sink = open_sink(path, storage_options)
        except BaseException:
            if self._base is not None:
                self._base.close()
            raise
        self.path = getattr(self._sink, "path", path)
        self._pos = 0
        # The preamble states the format version before any tensor is known.
        # A sink that can rewrite its first bytes (a local file) starts with
        # the oldest version and is corrected on close if a tensor needed a
        # newer one; any other (an upload) states the newest, which every
        # reader of this major version accepts (docs/format.md §14).
        self._rewrite_head = self._sink.rewrite_head  # None: the head cannot be written again
        self._head_minor = max(fmt.BASE_MINOR if self._rewrite_head else fmt.DTYPE_MINOR, self._hashing.minor)
        if self._sealing is not None:  # encrypted: 1.4, known now, so an upload states it too
            self._head_minor = fmt.TRUST_MINOR
        if self._rewrite_head is None:  # an upload states its codec's version too (1.5 for "huffman", "auto")
            self._head_minor = max(self._head_minor, codec.since)
        self._minor = self._head_minor
        self._write(fmt.encode_preamble(self._head_minor))

    # -- public --------------------------------------------------------------

    def add(self, name: str, array: Any, *, compression: Any = _DEFAULT) -> None:
        """Append one tensor.

        An array is not copied: it is read a window of chunks at a time, so
        a ``numpy.memmap`` larger than memory streams through too.

        Parameters
        ----------
        name : str
            The tensor's name: new in the file, without NUL, valid UTF-8.
        array : array_like
            A numpy array or anything ``np.asarray`` takes, of a dtype the
            format stores.
        compression : str, Codec or None, optional
            Overrides the writer's default codec for this tensor.

        Raises
        ------
        ClosedError
            The writer is closed.
        InvalidInputError
            A bad or duplicate name, or what cannot be made an array.
        UnsupportedDtypeError
            A dtype the format cannot store.
        """
        self._check_open()
        self._check_name(name)
        arr, spec = storable(array)
        flat = arr.reshape(-1).view(np.uint8)
        windows = (flat[i : i + WINDOW_BYTES] for i in range(0, len(flat), WINDOW_BYTES))
        self._add(name, spec, arr.shape, windows, compression)

    def add_pieces(self, name: str, pieces: Iterable[Any], *, dtype: Any, shape: Iterable[int],
                   compression: Any = _DEFAULT) -> None:
        """Append one tensor given as its bytes in C order, in pieces of any size.

        The pieces are arrays (of any dtype) or bytes-like objects, e.g.
        blocks of rows read one at a time from a tensor larger than memory.
        The writer holds one window of chunks (``WINDOW_BYTES``) at a time;
        pieces are not copied, so a piece's buffer must not be reused for
        the next.

        Parameters
        ----------
        name : str
            The tensor's name: new in the file, without NUL, valid UTF-8.
        pieces : iterable of buffers
            The tensor's bytes in C order.
        dtype : numpy.dtype or str
            The tensor's dtype.
        shape : sequence of int
            The tensor's shape.
        compression : str, Codec or None, optional
            Overrides the writer's default codec for this tensor.

        Raises
        ------
        InvalidInputError
            A bad or duplicate name, a shape that is not non-negative ints,
            or pieces that hold more or fewer bytes than ``dtype`` x
            ``shape``: the tensor's bytes are then partly written, so the
            writer is aborted (nothing reaches the target).
        ClosedError
            The writer is closed.
        """
        self._check_open()
        self._check_name(name)
        spec = spec_for(dtype)
        try:
            shape = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise InvalidInputError(f"shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 0 for d in shape):
            raise InvalidInputError(f"shape must not be negative, got {shape}")
        self._add(name, spec, shape, pieces, compression)

    def _add(self, name: str, spec: DtypeSpec, shape: tuple[int, ...], pieces, compression) -> None:
        """Encode and write a tensor a window of chunks at a time: the chunks
        of a window are encoded in parallel, written in order, and hashed on
        pool threads while the next are written."""
        itemsize = spec.dtype.itemsize
        problem = size_problem(shape, itemsize)
        if problem is not None:  # a file no reader could read (rules E7-E8)
            raise InvalidInputError(f"tensor {name!r} of shape {shape} cannot be stored: {problem}")
        asked = self._codec if compression is _DEFAULT else codec_for(compression, self._level)
        codec: CodecBase = asked.for_dtype(spec.dtype)  # "huffman" and "auto" store integers as "zstd"
        if codec.since > self._head_minor and self._rewrite_head is None:
            # An upload's preamble already states an older version: a codec
            # newer than it (codec 4 asked per tensor) gives way to codec 1.
            codec = ZstdPlanes(self._level)
        delta = self._base.plan(name, spec, shape) if self._base is not None else None
        grid = delta.grid if delta is not None else \
            ChunkGrid(shape, itemsize, *choose_grid(shape, itemsize, self._chunk_bytes))
        sizes = grid.raw_nbytes()
        nbytes = sum(sizes)
        if not nbytes:
            codec = RAW  # nothing to compress: an empty tensor is raw
        planes = codec.planes_for(itemsize) if codec is not RAW else 1
        self._pad_to_alignment()
        data_offset = self._pos
        lengths: list[int] = []
        checksums: list[int] = []
        base_checksums: list = []  # the hashing task's results for each base chunk
        try:
            for window in batch_by_bytes(rechunk(pieces, sizes), WINDOW_BYTES, len):
                stored = window
                if delta is not None:
                    # None: the first window says the tensor is better stored alone.
                    alone = partial(_encode, codec, planes, spec)
                    coded = delta.encode(window, len(lengths), codec, alone)
                    if coded is None:
                        delta = None
                    else:
                        stored, sums = coded
                        base_checksums += sums
                if delta is None and codec is not RAW:
                    encoded = run_all(partial(_encode, codec, planes, spec), window)
                    # Raw or compressed is decided on the first window (the
                    # whole tensor, unless it is larger than a window).
                    saved = 1 - sum(len(b) for b in encoded) / sum(len(c) for c in window)
                    if not lengths and saved < MIN_SAVING:
                        codec, planes = RAW, 1
                    else:
                        stored = encoded
                if self._sealing is not None:  # after the final encoding; hashed sealed
                    stored = self._sealing.seal(stored, name, len(lengths), len(self._chunk_lengths) + len(lengths))
                hashed = start_all(self._hashing.task, stored)  # hashed on pool threads while we write
                lengths += self._write_many(stored)
                checksums.extend(self._hashing.keep(hashed()))
        except BaseException:
            # Part of the tensor is written and the rest never will be: the
            # file cannot be finished, so nothing of it may reach the target.
            self.abort()
            raise
        self._chunk_checksums.extend(checksums)
        self._chunk_lengths.extend(lengths)
        self._base_checksums.extend(self._hashing.bases(base_checksums if delta is not None else None, len(lengths)))
        if delta is not None:
            codec, planes = delta.base.codec, delta.planes

        self._minor = max(self._minor, spec.since, codec.since, CONTENT_DELTA_MINOR if delta is not None else 0)
        self._names.append(name)
        self._seen.add(name)
        self._dims.extend(shape)
        self._entries.append(
            (data_offset, sum(lengths), nbytes, grid.n_chunks, grid.extent,
             spec.code, sealed_codec_of(codec).id if self._sealing and nbytes else codec.id, len(shape),
             grid.axis, planes, (0, 0, 0))
        )

    def close(self) -> None:
        """Finish the file: write the index, fsync, and move it into place (or complete the upload).

        Closing a closed writer does nothing. On any failure the writer is
        aborted: the target keeps what it had.

        Raises
        ------
        InvalidInputError
            The metadata cannot be written, or the index exceeds the
            format's limit.
        """
        if self._sink.closed:
            return
        try:
            if self._base is not None and self._base.used:
                self.system_metadata[BASE_KEY] = self._base.ref.to_json()
            # Each member says what this writer's records and chunks hold: never one copied from another file.
            system = self._hashing.with_member(self.system_metadata)
            if self._sealing is not None:
                system = self._sealing.with_member(system)
            self._pad_to_alignment()
            index_offset = self._pos
            index = fmt.encode_index(
                np.array(self._entries, dtype=fmt.ENTRY_DTYPE),
                np.array(self._dims, dtype=fmt.DIM_DTYPE),
                self._chunk_records(),
                "".join(n + "\0" for n in self._names).encode("utf-8"),
                encode_metadata({**check_user_metadata(self.metadata), **system}),
                self._alignment,
            )
            if self._sealing is not None:
                index = self._sealing.patch(index)  # rule S5: the MAC of the index as written
            if len(index) > fmt.MAX_INDEX_BYTES:
                raise InvalidInputError(f"index of {len(index)} bytes exceeds the format's limit")
            self._write(index)
            trailer = fmt.Trailer(index_offset, len(index), digest(index), fmt.FORMAT_MAJOR, self._minor)
            self._write(fmt.encode_trailer(trailer))
            if self._minor != self._head_minor:
                self._rewrite_head(fmt.encode_preamble(self._minor))
            self._sink.commit()
        except BaseException:
            self.abort()
            raise
        self._close_base()

    def abort(self) -> None:
        """Discard everything written; any existing target is left untouched."""
        try:
            self._sink.abort()
        finally:
            self._close_base()

    def _close_base(self) -> None:
        if self._base is not None:
            self._base.close()

    @property
    def base_file(self) -> str | None:
        """The file name of the base the file names, once closed.

        None unless a tensor was delta-coded against ``base``.
        """
        return self._base.ref.file if self._base is not None and self._base.used else None

    # -- internals -------------------------------------------------------------

    def _chunk_records(self) -> np.ndarray:
        deltas = self._base is not None and self._base.used
        plain = _chunk_records(self._chunk_lengths, self._chunk_checksums, self._base_checksums, deltas)
        return self._hashing.records(plain, deltas)

    def _check_open(self) -> None:
        if self._sink.closed:
            raise ClosedError(f"writer for {self.path} is closed")

    def _check_name(self, name) -> None:
        tensor_names.require_str(name)
        tensor_names.require_no_nul(name)
        tensor_names.require_utf8(name)
        tensor_names.require_new(name, self._seen)

    def _write(self, data) -> int:
        return self._write_many((data,))[0]

    def _write_many(self, blobs) -> list[int]:
        # A window's chunks in one call: a local sink writes them as one.
        lengths = self._sink.write_many(blobs)
        self._pos += sum(lengths)
        return lengths

    def _pad_to_alignment(self) -> None:
        pad = fmt.align_up(self._pos, self._alignment) - self._pos
        if pad:
            self._write(bytes(pad))


def _encode(codec, planes: int, spec: DtypeSpec, chunk):
    return codec.encode(chunk, planes, spec.is_float, dtype=spec.dtype)


def _chunk_records(lengths: list[int], checksums: list[int], base_checksums: list[int], deltas: bool) -> np.ndarray:
    """The chunk records: with their base checksums in a file with delta
    tensors (format 1.3), without in any other (whose bytes stay those of 1.0)."""
    records = np.empty(len(lengths), dtype=fmt.WIDE_CHUNK_DTYPE if deltas else fmt.CHUNK_DTYPE)
    records["stored_nbytes"] = np.array(lengths, dtype=np.uint64)
    records["checksum"] = np.array(checksums, dtype=np.uint64)
    if deltas:
        records["base_checksum"] = np.array(base_checksums, dtype=np.uint64)
    return records
