"""A local DCP checkpoint folder, whichever writer made it, as what it saved
(:mod:`lazystore.dcp.saved`): lazystore's (``metadata.lzy`` and
``rank-NNNNN.lzy``) or torch's ``FileSystemWriter``'s (``.metadata`` and
``__R_N.distcp``).

Every file the metadata names is opened, and every item it names is found,
when the folder is opened, before anything is read or written: a missing
rank file or item is an error naming it at once, not after gigabytes have
been copied. Files are opened by :func:`lazystore.sources.open_in_folder`
(a plain name in the folder, a regular file, no link out of it) and read
without a memory mapping, so pages read do not stay resident.
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy as np

from lazystore._core.naming import naming
from lazystore._core.torch_arrays import torch_name
from lazystore.dcp import pickled_metadata
from lazystore.dcp.metadata import item_key
from lazystore.dcp.reader import LazyStoreReader, check_rank_file
from lazystore.dcp.saved import SavedBytes, SavedChunk, SavedTensor, check_shape, check_tiling, tensor_spec
from lazystore.dcp.storage import METADATA_FILE, LazyStorageInfo
from lazystore.dcp.torch_chunks import TorchChunk
from lazystore.errors import CheckpointNotFoundError, FormatError, InvalidInputError
from lazystore.interop.detect import open_view
from lazystore.sources import is_url, open_in_folder

TORCH_METADATA_FILE = ".metadata"  # torch.distributed.checkpoint.filesystem's _metadata_fn


def folder_kind(folder) -> str | None:
    """"lazystore" or "torch" for a folder holding a DCP checkpoint of that
    writer (by its metadata file), else None."""
    if os.path.isfile(os.path.join(folder, METADATA_FILE)):
        return "lazystore"
    if os.path.isfile(os.path.join(folder, TORCH_METADATA_FILE)):
        return "torch"
    return None



class _Closable(Protocol):
    """What the folder keeps open: a lazystore view or a byte source."""

    def close(self) -> None: ...


class DcpFolder:
    """The tensors (:attr:`tensors`) and non-tensor items (:attr:`items`) of
    the DCP checkpoint in ``folder``; its files stay open until :meth:`close`.
    ``verify`` checks raw chunks of lazystore rank files against their
    checksums (compressed ones, and torch's CRC-32s, are always checked)."""

    def __init__(self, folder, *, verify: bool = True):
        self.folder = os.fspath(folder)
        if is_url(self.folder):
            raise InvalidInputError(f"{self.folder}: consolidation reads a local folder; copy the checkpoint "
                                    "to a local disk first")
        if not os.path.isdir(self.folder):
            if not os.path.exists(self.folder):
                raise CheckpointNotFoundError(f"{self.folder}: no such DCP checkpoint folder")
            raise FormatError(f"{self.folder}: not a folder; a DCP checkpoint is a folder")
        self.kind = folder_kind(self.folder)
        if self.kind is None:
            raise FormatError(
                f"{self.folder} is not a DCP checkpoint: it holds neither {METADATA_FILE} "
                f"(lazystore.dcp.LazyStoreWriter's) nor {TORCH_METADATA_FILE} (torch's FileSystemWriter's)")
        self.tensors: list[SavedTensor] = []
        self.items: list[SavedBytes] = []
        self._open: dict[str, _Closable] = {}  # file name -> its view (lazystore) or source (torch)
        try:
            if self.kind == "lazystore":
                self._read_lazystore(verify)
            else:
                self._read_torch()
            for t in self.tensors:
                check_tiling(t, self._metadata_path())
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for f in self._open.values():
            f.close()
        self._open.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- internals -------------------------------------------------------------------

    def _metadata_path(self) -> str:
        return os.path.join(self.folder, METADATA_FILE if self.kind == "lazystore" else TORCH_METADATA_FILE)

    def _file(self, name: str, make):
        """The open file ``name`` of the folder, opened once by ``make(source, path)``."""
        if name not in self._open:
            path = os.path.join(self.folder, name)
            try:
                source = open_in_folder(self.folder, name, mmap=False)
            except FileNotFoundError:
                raise FormatError(f"{path} is missing: the checkpoint's metadata "
                                  f"({self._metadata_path()}) names it") from None
            with naming(path):
                self._open[name] = make(source, path)
        return self._open[name]

    def _read_lazystore(self, verify: bool) -> None:
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex

        lazy_reader = LazyStoreReader(self.folder)
        md = lazy_reader.read_metadata()  # strict JSON, no pickle (lazystore.dcp.metadata)

        def rank_view(source, path):
            view = open_view(source, verify=verify)
            try:
                check_rank_file(view, path, os.path.basename(path), lazy_reader.save_id)
            except BaseException:
                view.close()
                raise
            return view

        def located(index: MetadataIndex):
            info = md.storage_data.get(index)
            if not isinstance(info, LazyStorageInfo):
                raise FormatError(f"{self._metadata_path()}: no storage entry for {item_key(index)!r}")
            view = self._file(info.relative_path, rank_view)
            if info.key not in view:
                raise FormatError(f"{os.path.join(self.folder, info.relative_path)} has no item {info.key!r} "
                                  "named by the DCP metadata")
            return view, info.key, os.path.join(self.folder, info.relative_path)

        for fqn, item in md.state_dict_metadata.items():
            if isinstance(item, BytesStorageMetadata):
                view, key, file = located(MetadataIndex(fqn))
                self.items.append(SavedBytes(fqn, view.info(key).nbytes, _LazyBytes(view, key, f"{file}: {key}")))
                continue
            spec = tensor_spec(torch_name(item.properties.dtype), fqn, self._metadata_path())
            shape = tuple(item.size)
            chunks = []
            for c in item.chunks:
                view, key, file = located(MetadataIndex(fqn, c.offsets))
                sizes = tuple(c.sizes)
                chunk = _LazyChunk(view, key, spec, sizes, f"{file}: {key}")
                chunks.append(SavedChunk(tuple(c.offsets), sizes, file, chunk))
            self.tensors.append(SavedTensor(fqn, spec, shape, tuple(chunks)))

    def _read_torch(self) -> None:
        path = self._metadata_path()
        md = pickled_metadata.read(path)

        def located(fqn: str, offsets):
            info = md.storage.get((fqn, offsets))
            what = fqn if offsets is None else f"{fqn}{list(offsets)}"
            if info is None:
                raise FormatError(f"{path}: no storage entry for {what}")
            if info.transforms:
                raise FormatError(f"{path}: {what} was written through DCP stream extensions "
                                  f"{list(info.transforms)}, which lazystore does not read")
            source = self._file(info.file, lambda source, _path: source)
            return source, info, os.path.join(self.folder, info.file), what

        for fqn in md.byte_items:
            source, info, file, _ = located(fqn, None)
            if info.offset + info.length > source.size:
                raise FormatError(f"{file}: {fqn}: the item lies past the end of the file (truncated?)")
            self.items.append(SavedBytes(fqn, info.length, _TorchBytes(source, info.offset, info.length)))
        for fqn, t in md.tensors.items():
            spec = tensor_spec(t.dtype, fqn, path)
            check_shape(t.shape, spec, fqn, path)
            chunks = []
            for offsets, sizes in zip(t.chunks, t.chunk_sizes):
                source, info, file, what = located(fqn, offsets)
                reader = TorchChunk(source, info.offset, info.length, spec, sizes, f"{file}: {what}")
                chunks.append(SavedChunk(offsets, sizes, file, reader))
            self.tensors.append(SavedTensor(fqn, spec, t.shape, tuple(chunks)))


class _LazyChunk:
    """A chunk saved in a lazystore rank file: rows through ``get_slice``, which
    reads (and checks) only the stored chunks that hold them."""

    def __init__(self, view, key: str, spec, sizes: tuple[int, ...], where: str):
        info = view.info(key)
        if np.dtype(info.dtype) != spec.dtype or tuple(info.shape) != sizes:
            raise FormatError(f"{where}: holds {info.dtype} {list(info.shape)}; the metadata says "
                              f"{spec.name} {list(sizes)}")
        self._view, self._key, self._scalar = view, key, not sizes

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self._scalar:  # a 0-d tensor is its one row
            return np.asarray(self._view[self._key]).reshape(1)
        return self._view.get_slice(self._key)[start:stop]


class _LazyBytes:
    def __init__(self, view, key: str, where: str):
        self._view, self._key, self._where = view, key, where

    def __call__(self):
        arr = self._view[self._key]
        if arr.dtype != np.uint8 or arr.ndim != 1:
            raise FormatError(f"{self._where}: a bytes item is not a 1-d uint8 tensor")
        return arr.tobytes()


class _TorchBytes:
    def __init__(self, source, offset: int, length: int):
        self._source, self._offset, self._length = source, offset, length

    def __call__(self):
        return bytes(self._source.read(self._offset, self._offset + self._length))
