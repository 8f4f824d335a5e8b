"""Streaming, atomic, durable writer.

Tensors are written as they are added, so the writer holds at most one
tensor and its encoded chunks in memory; the index goes last. Everything is
written to a hidden temporary file beside the target, fsync'd, renamed over
the target and the folder fsync'd: a reader sees the old file or the new
one, never a mix, and a failure or crash leaves any previous file intact.
A save to object storage streams into the store's upload instead, which
makes the object appear only when complete (see :mod:`lazystore.sinks`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from lazystore._native import layout as fmt
from lazystore._core.checksum import digest
from lazystore._core.chunking import DEFAULT_CHUNK_BYTES, ChunkGrid, choose_grid
from lazystore.codecs import RAW, codec_for
from lazystore._core.dtypes import DtypeSpec, spec_for
from lazystore.errors import ClosedError, InvalidInputError
from lazystore._core.parallel import run_all, start_all
from lazystore.sinks import CloseOrAbort, open_sink

_DEFAULT = object()
# A compressed tensor must save at least this fraction, else it is stored raw
# and stays mmap-able: a 1% saving is not worth losing zero-copy reads.
MIN_SAVING = 0.01


class Writer(CloseOrAbort):
    """Write a checkpoint one tensor at a time.

    >>> with Writer("model.lzy", compression="zstd") as w:   # doctest: +SKIP
    ...     w.add("layer0.weight", array)

    The file appears at ``path`` only when the ``with`` block (or
    :meth:`close`) completes; an exception inside the block removes the
    temporary file and leaves any existing ``path`` untouched.

    ``path`` may be an object-store URL (``s3://``, ``gs://``, ``az://``, and
    ``memory://``), with ``storage_options`` for its fsspec filesystem: the
    object appears when its upload completes, and an error cancels it.
    """

    def __init__(
        self,
        path,
        *,
        compression=None,
        compression_level: int | None = None,
        metadata: Mapping | None = None,
        alignment: int = fmt.DEFAULT_ALIGNMENT,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        storage_options: Mapping | None = None,
    ):
        if alignment < 8 or alignment > (1 << 30) or alignment & (alignment - 1):
            raise InvalidInputError(f"alignment must be a power of two between 8 and 2**30, got {alignment}")
        if not 16 <= chunk_bytes <= (1 << 31):
            raise InvalidInputError(f"chunk_bytes must be between 16 and 2**31, got {chunk_bytes}")
        self.path = path
        self.metadata = dict(metadata) if metadata is not None else {}
        _check_user_metadata(self.metadata)
        _encode_metadata(self.metadata)  # fail now, not after writing gigabytes
        # lazystore's own entries (RESERVED_METADATA_PREFIX keys), set by
        # higher layers such as nested-state saving; written beside the user's.
        self.system_metadata: dict = {}
        self._codec = codec_for(compression, compression_level)
        self._level = compression_level
        self._alignment = alignment
        self._chunk_bytes = chunk_bytes
        self._names: list[str] = []
        self._seen: set[str] = set()
        self._entries: list[tuple] = []
        self._dims: list[int] = []
        self._chunk_lengths: list[int] = []
        self._chunk_checksums: list[int] = []
        # A sink dropped unfinished (with this writer) discards what it holds.
        self._sink = open_sink(path, storage_options)
        self.path = getattr(self._sink, "path", path)
        self._pos = 0
        # The preamble states the format version before any tensor is known.
        # A sink that can rewrite its first bytes (a local file) starts with
        # the oldest version and is corrected on close if a tensor needed a
        # newer one; any other (an upload) states the newest, which every
        # reader of this major version accepts (docs/format.md §14).
        self._rewrite_head = getattr(self._sink, "rewrite_head", None)
        self._head_minor = fmt.BASE_MINOR if self._rewrite_head else fmt.FORMAT_MINOR
        self._minor = self._head_minor
        self._write(fmt.encode_preamble(self._head_minor))

    # -- public --------------------------------------------------------------

    def add(self, name: str, array, *, compression=_DEFAULT) -> None:
        """Append one tensor. ``compression`` overrides the writer's default."""
        self._check_open()
        self._check_name(name)
        arr, spec = _storable(array)
        codec = self._codec if compression is _DEFAULT else codec_for(compression, self._level)
        grid = ChunkGrid(arr.shape, arr.itemsize, *choose_grid(arr.shape, arr.itemsize, self._chunk_bytes))
        flat = arr.reshape(-1).view(np.uint8)
        chunks = [flat[o : o + n] for o, n in grid.raw_spans()]

        planes = 1
        stored: list = chunks
        if codec is not RAW and chunks:
            planes = codec.planes_for(arr.itemsize)
            encoded = run_all(lambda c: codec.encode(c, planes, spec.is_float), chunks)
            if sum(len(b) for b in encoded) <= (1 - MIN_SAVING) * arr.nbytes:
                stored = encoded
            else:
                codec, planes = RAW, 1
        else:
            codec = RAW
        lengths = [memoryview(b).nbytes for b in stored]
        checksums = start_all(digest, stored)  # hashed on pool threads while we write

        self._pad_to_alignment()
        data_offset = self._pos
        if codec is RAW:
            self._write(flat)  # one write of the whole tensor, zero-copy
        else:
            for blob in stored:
                self._write(blob)
        self._chunk_checksums.extend(checksums())
        self._chunk_lengths.extend(lengths)

        self._minor = max(self._minor, spec.since)
        self._names.append(name)
        self._seen.add(name)
        self._dims.extend(arr.shape)
        self._entries.append(
            (data_offset, sum(lengths), arr.nbytes, grid.n_chunks, grid.extent,
             spec.code, codec.id, arr.ndim, grid.axis, planes, (0, 0, 0))
        )

    def close(self) -> None:
        """Finish the file: write the index, fsync, and move it into place
        (or complete the upload)."""
        if self._sink.closed:
            return
        try:
            self._pad_to_alignment()
            index_offset = self._pos
            index = fmt.encode_index(
                np.array(self._entries, dtype=fmt.ENTRY_DTYPE),
                np.array(self._dims, dtype=fmt.DIM_DTYPE),
                _chunk_records(self._chunk_lengths, self._chunk_checksums),
                "".join(n + "\0" for n in self._names).encode("utf-8"),
                _encode_metadata({**_check_user_metadata(self.metadata), **self.system_metadata}),
                self._alignment,
            )
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

    def abort(self) -> None:
        """Discard everything written; any existing target is left untouched."""
        self._sink.abort()


    # -- internals -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._sink.closed:
            raise ClosedError(f"writer for {self.path} is closed")

    def _check_name(self, name) -> None:
        if not isinstance(name, str):
            raise InvalidInputError(f"tensor names must be str, got {type(name).__name__}: {name!r}")
        if "\0" in name:
            raise InvalidInputError(f"tensor name {name!r} contains a NUL character")
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(f"tensor name {name!r} cannot be encoded as UTF-8") from None
        if name in self._seen:
            raise InvalidInputError(f"duplicate tensor name {name!r}")

    def _write(self, data) -> None:
        self._pos += self._sink.write(data)

    def _pad_to_alignment(self) -> None:
        pad = fmt.align_up(self._pos, self._alignment) - self._pos
        if pad:
            self._write(bytes(pad))


def _storable(array) -> tuple[np.ndarray, DtypeSpec]:
    """C-contiguous little-endian ndarray of a supported dtype (no copy if it is one)."""
    try:
        arr = np.asarray(array)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is bad input
        raise InvalidInputError(f"cannot convert {type(array).__name__} to an array: {exc}") from None
    spec = spec_for(arr.dtype)
    # order="C" (not ascontiguousarray, which turns 0-d arrays into 1-d ones)
    return np.asarray(arr, dtype=spec.dtype, order="C"), spec


def _check_user_metadata(metadata: dict) -> dict:
    for key in metadata:
        if not isinstance(key, str):
            raise InvalidInputError(f"metadata keys must be str, got {key!r}")
        if key.startswith(fmt.RESERVED_METADATA_PREFIX):
            raise InvalidInputError(f"metadata key {key!r} is reserved for lazystore")
    return metadata


def _encode_metadata(metadata: Mapping) -> bytes:
    if not metadata:
        return b""
    try:
        text = json.dumps(metadata, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInputError(f"metadata must be JSON-serialisable (no NaN/inf, valid text): {exc}") from None


def _chunk_records(lengths: list[int], checksums: list[int]) -> np.ndarray:
    records = np.empty(len(lengths), dtype=fmt.CHUNK_DTYPE)
    records["stored_nbytes"] = np.array(lengths, dtype=np.uint64)
    records["checksum"] = np.array(checksums, dtype=np.uint64)
    return records
