"""Reading the items of torch's ``FileSystemWriter`` files (``__0_0.distcp``)
a run of rows at a time, checked.

``FileSystemWriter`` writes each tensor chunk with ``torch.save`` into a byte
range of a rank's ``.distcp`` file: a small zip whose ``data.pkl`` describes
the tensor and whose ``data/0`` member holds its storage, uncompressed, with
its CRC-32. ``FileSystemReader`` ``torch.load``\\ s each whole chunk. Here:

- ``torch.load(weights_only=True, map_location="meta")`` reads the chunk's
  description only (dtype, size, strides; it touches ~5 KB, no storage bytes),
  with torch's allow-list semantics, never a plain unpickle;
- the storage member is located in the zip and its rows are read from the
  file (``pread``, no mapping), so memory holds one run of rows, not the chunk;
- the CRC-32 torch recorded is computed over the storage as it streams past
  (each chunk is read once, front to back), and a mismatch at the end raises
  :class:`~lazystore.ChecksumError`; consolidation then discards its output.

A chunk saved with strides other than row-major (a transposed view), or
whose storage is larger than the tensor, is read whole, once.
"""

from __future__ import annotations

import io
import math
import struct
import zipfile
import zlib

import numpy as np

from lazystore._core import torch_arrays as torch_adapter
from lazystore._core.dtypes import DtypeSpec
from lazystore._core.torch_refusals import refusal_reason
from lazystore.errors import ChecksumError, FormatError
from lazystore.sources import ByteSource

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_LOCAL_MAGIC = b"PK\x03\x04"


class FileSlice(io.RawIOBase):
    """``length`` bytes at ``start`` of a byte source, as a seekable file of
    their own (what ``torch.load`` and ``zipfile`` read)."""

    def __init__(self, source: ByteSource, start: int, length: int):
        super().__init__()
        self._source, self._start, self._length, self._pos = source, start, length, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._length}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self._length - self._pos))
        if n:
            self._source.read_into(self._start + self._pos, memoryview(buffer).cast("B")[:n])
        self._pos += n
        return n


class TorchChunk:
    """One tensor chunk of a ``.distcp`` file: ``length`` bytes at ``offset``
    of ``source``, a tensor of ``sizes`` and ``spec``'s dtype. ``where``
    names it in errors ("ckpt/__1_0.distcp: model.w[0,64]")."""

    def __init__(self, source: ByteSource, offset: int, length: int, spec: DtypeSpec, sizes: tuple[int, ...],
                 where: str):
        if offset + length > source.size:
            raise FormatError(f"{where}: the item lies past the end of the file (truncated?)")
        self._source, self._offset, self._length = source, offset, length
        self._spec, self._sizes, self._where = spec, sizes, where
        self._data: int | None = None  # where the storage bytes start, in the file
        self._whole: np.ndarray | None = None
        self._next_row, self._crc = 0, 0

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self._data is None:
            self._open()
        assert self._data is not None  # _open() sets it or raises
        n_rows = self._sizes[0] if self._sizes else 1
        row_shape = self._sizes[1:]
        if self._whole is not None:
            out = self._whole.reshape(n_rows, *row_shape)[start:stop]
            if stop == n_rows:
                self._whole = None  # each chunk is read once: let it go
            return out
        if start != self._next_row:
            raise AssertionError(f"{self._where}: rows read out of order")  # consolidation reads in order
        row_bytes = math.prod(row_shape) * self._spec.dtype.itemsize
        data = self._source.read(self._data + start * row_bytes, self._data + stop * row_bytes)
        self._crc = zlib.crc32(data, self._crc)
        self._next_row = stop
        if stop == n_rows:
            self._check_crc(self._crc)
        return np.frombuffer(data, dtype=self._spec.dtype).reshape(stop - start, *row_shape)

    # -- the chunk's zip ----------------------------------------------------------------

    def _open(self) -> None:
        meta = self._describe()
        z = self._zip()
        storages = [i for i in z.infolist() if i.filename.rsplit("/", 2)[-2:-1] == ["data"]]
        if len(storages) != 1:
            raise FormatError(f"{self._where}: the saved chunk holds {len(storages)} storages, not one tensor's")
        info = storages[0]
        storage_nbytes = meta.untyped_storage().nbytes()
        if info.compress_type != zipfile.ZIP_STORED or info.file_size != storage_nbytes:
            raise FormatError(f"{self._where}: the chunk's storage is compressed or not {storage_nbytes} bytes")
        byteorder = next((i for i in z.infolist() if i.filename.endswith("/byteorder")), None)
        if byteorder is not None and z.read(byteorder) != b"little":
            raise FormatError(f"{self._where}: saved on a big-endian machine, which lazystore does not read")
        at = self._offset + info.header_offset
        head = bytes(self._source.read(at, min(at + _LOCAL_HEADER.size, self._source.size)))
        if len(head) != _LOCAL_HEADER.size:
            raise FormatError(f"{self._where}: the chunk's zip is damaged (truncated)")
        magic, name_len, extra_len = _LOCAL_HEADER.unpack(head)
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        if magic != _LOCAL_MAGIC or start + storage_nbytes > self._length:
            raise FormatError(f"{self._where}: the chunk's zip is damaged (its storage lies outside it)")
        self._data, self._expected_crc = self._offset + start, info.CRC
        itemsize = self._spec.dtype.itemsize
        numel = math.prod(self._sizes)
        if meta.is_contiguous() and meta.storage_offset() == 0 and storage_nbytes == numel * itemsize:
            return  # rows stream straight from the file
        # Strided, or a view into a larger storage: read the storage once, check it, arrange it.
        data = self._source.read(self._data, self._data + storage_nbytes)
        self._check_crc(zlib.crc32(data))
        strides, offset = meta.stride(), meta.storage_offset()
        last = offset + sum((n - 1) * s for n, s in zip(self._sizes, strides)) if numel else -1
        if numel and last * itemsize + itemsize > storage_nbytes:
            raise FormatError(f"{self._where}: the chunk's strides reach past its storage")
        flat = np.frombuffer(data, dtype=self._spec.dtype)
        self._whole = np.array(np.lib.stride_tricks.as_strided(
            flat[offset:], shape=self._sizes, strides=[s * itemsize for s in strides]))

    def _describe(self):
        """The chunk as a meta tensor: its dtype, size and strides, no data."""
        torch = torch_adapter.require()
        head = bytes(self._source.read(self._offset, self._offset + min(self._length, len(_LOCAL_MAGIC))))
        if head != _LOCAL_MAGIC:  # FileSystemWriter's safetensors format, or damage
            raise FormatError(f"{self._where}: not a tensor saved by torch.save (a torch zip); lazystore reads "
                              "FileSystemWriter's default (torch_save) format only")
        try:
            meta = torch.load(FileSlice(self._source, self._offset, self._length), weights_only=True,
                              map_location="meta")
        except Exception as exc:  # noqa: BLE001 - anything torch refuses is bad input
            raise FormatError(f"{self._where}: torch.load(weights_only=True) refused the saved chunk: "
                              f"{refusal_reason(exc)}") from None
        if type(meta) is not torch.Tensor:
            raise FormatError(f"{self._where}: holds a {type(meta).__name__}, not a tensor")
        got = torch_adapter.torch_name(meta.dtype)
        if got != self._spec.name or tuple(meta.shape) != self._sizes:
            raise FormatError(f"{self._where}: holds a {got} tensor of size {list(meta.shape)}; the "
                              f"metadata says {self._spec.name} {list(self._sizes)}")
        return meta

    def _zip(self) -> zipfile.ZipFile:
        try:
            return zipfile.ZipFile(FileSlice(self._source, self._offset, self._length))
        except (zipfile.BadZipFile, ValueError, OSError) as exc:
            raise FormatError(f"{self._where}: the saved chunk is not a torch zip: {exc}") from None

    def _check_crc(self, actual: int) -> None:
        if actual != self._expected_crc:
            raise ChecksumError(f"{self._where}: damaged: the chunk's CRC-32 is {actual:08x}, "
                                f"torch.save recorded {self._expected_crc:08x}")


class Unloadable(Exception):
    """``torch.load(weights_only=True)`` refused a non-tensor item (its reason)."""


def load_value(data, where: str):
    """A non-tensor item's value from its ``torch.save`` bytes, with
    ``torch.load(weights_only=True)`` semantics only. Its zip members'
    CRC-32s, which torch's reader does not check, are checked first:
    damage is a ChecksumError, a value torch refuses :class:`Unloadable`."""
    torch = torch_adapter.require()
    data = bytes(data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise FormatError(f"{where}: not an object saved by torch.save: {exc}") from None
    if bad is not None:
        raise ChecksumError(f"{where}: damaged: the CRC-32 of {bad} does not match")
    try:
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - whatever torch refuses; nothing of it ran
        raise Unloadable(refusal_reason(exc)) from None
