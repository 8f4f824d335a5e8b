"""safetensors files: read as lazystore indexes, and written for compatibility.

A safetensors file is::

    u64 N (little-endian) | N bytes of UTF-8 JSON header | data

The header maps each tensor name to ``{"dtype", "shape", "data_offsets":
[begin, end]}`` (offsets relative to the data), plus an optional
``"__metadata__"`` object of str to str.

Reading: :func:`read_index` validates the header as the safetensors library
does, and more (see :func:`parse_header`), then describes the file with the
same validated :class:`~lazystore._native.index.Index` a lazystore file has: raw
tensors, so a local file gives zero-copy views of its mapping. safetensors
records no checksums. A file written by :class:`SafetensorsWriter` carries
lazystore's in ``__metadata__["lazystore.checksums"]`` (xxh3-64 of each
tensor's bytes), and then each tensor is one chunk checked against it
exactly as in a lazystore file; any other file reads with checks skipped,
and ``verify()`` raises VerificationUnavailableError (so does opening it
with ``verify=True``).

Writing: :class:`SafetensorsWriter` has the Writer interface (``add``,
``close``, ``abort``, context manager) and writes plain uncompressed data.
The header must precede the data and depends on every tensor, so tensors are
spooled to a temporary file as they are added (memory stays bounded) and
copied behind the header on close, through the same atomic sinks as
lazystore files.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from collections.abc import Mapping

import numpy as np

from lazystore._core import arguments, frameworks, strict_json, tensor_names
from lazystore._core.checksum import hasher as new_hasher
from lazystore._core.chunking import DEFAULT_CHUNK_BYTES, ChunkGrid, choose_grid
from lazystore._core.dtypes import BY_SAFETENSORS, from_safetensors_shape, spec_for, to_safetensors_shape
from lazystore._core.rechunk import as_bytes
from lazystore._native import layout as fmt
from lazystore._native.entry_rules import MAX_NDIM, size_problem
from lazystore._native.index import Index
from lazystore.codecs.zstd import check_level
from lazystore.errors import ClosedError, FormatError, InvalidInputError, UnsupportedDtypeError
from lazystore.sinks import open_sink
from lazystore.sources import local_path
from lazystore.writing.interface import TensorWriter

# The safetensors library refuses headers larger than this.
MAX_HEADER_BYTES = 100_000_000
# Reserved __metadata__ keys lazystore writes (and reads back).
CHECKSUMS_KEY = "lazystore.checksums"  # JSON: tensor name -> xxh3-64 hex of its bytes
METADATA_KEY = "lazystore.metadata"  # JSON: user metadata values that are not str
SYSTEM_KEY = "lazystore.system"  # JSON: lazystore's own entries (nested-state tree)
# JSON: the str entries lazystore added for other tools (safetensors' "format"
# for torch tensors), which lazystore's readers leave out of the user's metadata.
ADDED_KEY = "lazystore.added"
_OWN_PREFIX = "lazystore."

# -- reading ---------------------------------------------------------------------------


def looks_like(head: bytes) -> bool:
    """Could a file starting with ``head`` (its first 9+ bytes) be safetensors?
    The header is a JSON object, so byte 8 is ``{``; the length is checked
    by the parser, which names what is wrong."""
    return len(head) >= 9 and head[8:9] == b"{"


def read_index(source) -> tuple[Index, tuple]:
    """The validated Index of a safetensors source (two small reads), and its
    format version: safetensors has none, so ``()``."""
    size = source.size
    if size < 8:
        raise FormatError(f"not a safetensors file: {size} bytes is shorter than its 8-byte header length")
    (n,) = struct.unpack("<Q", bytes(source.read(0, 8)))
    if n > MAX_HEADER_BYTES:
        raise FormatError(f"safetensors header of {n} bytes exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + n > size:
        raise FormatError(f"safetensors header of {n} bytes runs past the end of this {size}-byte file")
    header = bytes(source.read(8, 8 + n))
    return build_index(parse_header(header, size - 8 - n), 8 + n), ()


class Header:
    """A parsed, validated header: tensors in file order, and metadata."""

    def __init__(self, tensors: list[tuple[str, np.dtype, tuple[int, ...], int, int]], metadata: dict[str, str]):
        self.tensors = tensors  # (name, dtype, shape, begin, end), sorted by begin
        self.metadata = metadata


def parse_header(text: bytes, data_len: int) -> Header:
    """Check a header as safetensors does, and a little more.

    Rejected with FormatError: a header not starting with ``{``, not UTF-8,
    not JSON, or not an object; duplicate keys (safetensors keeps the last;
    we refuse to guess); ``__metadata__`` that is not an object of str to
    str; a tensor entry that is not an object with a known ``dtype``, a
    ``shape`` of non-negative ints and two non-negative ``data_offsets``;
    element counts that overflow; byte lengths that differ from
    dtype x shape; data that does not start at 0 or has gaps or overlaps;
    data that ends before or after the end of the file.
    """
    if not text.startswith(b"{"):
        raise FormatError("corrupt safetensors header: does not start with '{'")
    try:
        value = strict_json.loads(text)
    except strict_json.TooLarge as exc:
        raise FormatError(f"safetensors header too large to read: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt safetensors header: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("corrupt safetensors header: not a JSON object")
    metadata = value.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError("corrupt safetensors header: __metadata__ is not an object of str to str")
    tensors = []
    for name, info in value.items():
        tensors.append((name, *_tensor_info(name, info)))
    tensors.sort(key=lambda t: (t[3], t[4]))  # stable: empty tensors keep header order
    end = 0
    for name, _dtype, _shape, begin, stop in tensors:
        if begin != end:
            what = "overlaps the previous tensor" if begin < end else f"leaves a gap of {begin - end} bytes"
            if not end and begin > 0:
                what = f"the data starts at offset {begin}, not 0"
            raise FormatError(f"corrupt safetensors header: tensor {name!r}: {what}")
        end = stop
    if end != data_len:
        what = "runs past the end of the file" if end > data_len else f"leaves {data_len - end} trailing bytes"
        raise FormatError(f"corrupt safetensors file: the data ({end} bytes) {what}")
    return Header(tensors, metadata)


def _tensor_info(name: str, info) -> tuple[np.dtype, tuple[int, ...], int, int]:
    where = f"corrupt safetensors header: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise FormatError(f"{where}: not an object with dtype, shape and data_offsets")
    spec = BY_SAFETENSORS.get(info["dtype"]) if isinstance(info["dtype"], str) else None
    if spec is None:
        raise FormatError(f"{where}: unsupported dtype {info['dtype']!r}")
    dtype = spec.dtype
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
        raise FormatError(f"{where}: shape is not a list of non-negative integers")
    if len(shape) > MAX_NDIM:
        raise FormatError(f"{where}: more than {MAX_NDIM} dimensions")
    st_shape, shape = shape, from_safetensors_shape(spec, shape)
    if shape is None:
        raise FormatError(f"{where}: {spec.safetensors} shape {st_shape} cannot be read as {spec.name} "
                          f"({spec.packed} values per byte along an even last dimension, as torch holds it)")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_uint(o) for o in offsets):
        raise FormatError(f"{where}: data_offsets is not two non-negative integers")
    begin, end = offsets
    if end < begin:
        raise FormatError(f"{where}: data_offsets end before they begin")
    problem = size_problem(tuple(shape), dtype.itemsize)  # as for lazystore files: rules E7-E8
    if problem is not None:
        raise FormatError(f"{where}: {problem}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes != end - begin:
        raise FormatError(f"{where}: {end - begin} bytes of data, but dtype x shape needs {nbytes}")
    return dtype, tuple(shape), begin, end


def _is_uint(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 64




def build_index(header: Header, data_start: int) -> Index:
    """lazystore's Index for a validated header whose data starts at
    ``data_start`` (8 + header length)."""
    names = [t[0] for t in header.tensors]
    metadata, checksums, unverifiable = _split_metadata(header.metadata, names)
    n = len(names)
    cols = {f: np.zeros(n, dtype=np.uint64) for f in ("data_offset", "nbytes", "chunk_count", "chunk_extent",
                                                      "dtype", "ndim", "chunk_axis")}
    dims: list[int] = []
    lengths: list[int] = []
    sums: list[int] = []
    for pos, (name, dtype, shape, begin, end) in enumerate(header.tensors):
        nbytes = end - begin
        itemsize = dtype.itemsize
        if checksums is not None:  # one chunk per tensor, checked against its recorded checksum
            axis, extent = (0, 0) if nbytes == 0 else (0, shape[0] if shape else 1)
        else:  # no checksums: chunks only set the granularity of remote reads
            axis, extent = choose_grid(shape, itemsize, DEFAULT_CHUNK_BYTES)
        chunk_lengths = ChunkGrid(shape, itemsize, axis, extent).raw_nbytes() if nbytes else []
        lengths += chunk_lengths
        sums += [checksums[name]] if checksums is not None and nbytes else [0] * len(chunk_lengths)
        dims += shape
        for field, value in (("data_offset", data_start + begin), ("nbytes", nbytes),
                             ("chunk_count", len(chunk_lengths)), ("chunk_extent", extent),
                             ("dtype", spec_for(dtype).code), ("ndim", len(shape)), ("chunk_axis", axis)):
            cols[field][pos] = value
    entries = np.zeros(n, dtype=fmt.ENTRY_DTYPE)
    for field, values in cols.items():
        entries[field] = values
    entries["stored_nbytes"] = cols["nbytes"]
    entries["planes"] = 1
    chunks = np.empty(len(lengths), dtype=fmt.CHUNK_DTYPE)
    chunks["stored_nbytes"] = np.array(lengths, dtype=np.uint64)
    chunks["checksum"] = np.array(sums, dtype=np.uint64)
    raw = fmt.RawIndex(entries, np.array(dims, dtype=fmt.DIM_DTYPE), chunks, b"", b"", alignment=1)
    data_end = data_start + (header.tensors[-1][4] if header.tensors else 0)
    return Index.foreign(raw, names, metadata, data_end, kind="safetensors",
                         checksums_known=checksums is not None, unverifiable=unverifiable)


def _split_metadata(st_meta: dict[str, str], names: list[str]):
    """``(metadata, checksums, why unverifiable)`` from a header's __metadata__.

    The user's entries are the str ones, with the values of
    ``lazystore.metadata`` (JSON) restored over them; lazystore's own entries
    come from ``lazystore.system``; the checksums from ``lazystore.checksums``
    when it lists exactly the file's tensors."""
    added = _json_list(st_meta[ADDED_KEY], ADDED_KEY) if ADDED_KEY in st_meta else []
    metadata: dict = {k: v for k, v in st_meta.items() if not k.startswith(_OWN_PREFIX) and k not in added}
    if METADATA_KEY in st_meta:
        metadata.update(_json_object(st_meta[METADATA_KEY], METADATA_KEY))
    if SYSTEM_KEY in st_meta:
        system = _json_object(st_meta[SYSTEM_KEY], SYSTEM_KEY)
        metadata.update({k: v for k, v in system.items() if k.startswith(fmt.RESERVED_METADATA_PREFIX)})
    if CHECKSUMS_KEY not in st_meta:
        return metadata, None, "it is a safetensors file with no lazystore checksums (safetensors records none)"
    recorded = _json_object(st_meta[CHECKSUMS_KEY], CHECKSUMS_KEY)
    if set(recorded) != set(names):
        return metadata, None, f"its {CHECKSUMS_KEY} do not list exactly its tensors (the file was changed)"
    checksums = {}
    for name, text in recorded.items():
        try:
            if not isinstance(text, str) or len(text) != 16:
                raise ValueError
            checksums[name] = int(text, 16)
        except ValueError:
            raise FormatError(f"corrupt {CHECKSUMS_KEY}: {text!r} for {name!r} is not 16 hex digits") from None
    return metadata, checksums, None


def _json_list(text: str, key: str) -> list:
    return _json_entry(text, key, list, "a JSON list")


def _json_object(text: str, key: str) -> dict:
    return _json_entry(text, key, dict, "a JSON object")


def _json_entry(text: str, key: str, kind: type, kind_name: str):
    """lazystore's own entry ``key`` of the safetensors metadata, parsed and
    of the kind expected. lazystore wrote these entries and never repeats a
    name: a duplicate (two checksums for one tensor, say) means the text was
    tampered with, and strict_json refuses it."""
    try:
        value = strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt {key} in the safetensors metadata: {exc}") from None
    if not isinstance(value, kind):
        raise FormatError(f"corrupt {key} in the safetensors metadata: not {kind_name}")
    return value


# -- writing ---------------------------------------------------------------------------

_COPY_BLOCK = 4 << 20


def compression_refusal(compression) -> str | None:
    """Why a safetensors file cannot be written with ``compression`` (None:
    it can, being None or "none")."""
    if compression in (None, "none"):
        return None
    return f"safetensors stores raw bytes, so compression={compression!r} cannot apply"


class SafetensorsWriter(TensorWriter):
    """Write a safetensors file one tensor at a time, atomically.

    Interface of :class:`lazystore.Writer`. safetensors stores raw bytes:
    ``compression`` may only be None or "none" (the per-tensor ``compression``
    of :meth:`add` is accepted and ignored), and ``compression_level`` is
    checked, as a Writer checks it, and unused. ``metadata`` may hold
    any JSON values; str values go into ``__metadata__`` as they are, the
    others as JSON in ``lazystore.metadata``. ``system_metadata`` (the
    nested-state tree) goes in ``lazystore.system`` and the checksums in
    ``lazystore.checksums`` when the header stays under the 100 MB limit
    with them (they are dropped, not the file, when it would not).
    """

    def __init__(self, path, *, metadata: Mapping | None = None, storage_options: Mapping | None = None,
                 compression=None, compression_level: int | None = None):
        refused = compression_refusal(compression)
        if refused is not None:
            raise InvalidInputError(f"{path}: {refused}")
        check_level(compression_level)
        self.metadata = arguments.json_object("metadata", metadata)
        for key in self.metadata:
            if not isinstance(key, str):
                raise InvalidInputError(f"metadata keys must be str, got {key!r}")
            if key.startswith((_OWN_PREFIX, fmt.RESERVED_METADATA_PREFIX)):
                raise InvalidInputError(f"metadata key {key!r} is reserved for lazystore")
        _json_text({k: v for k, v in self.metadata.items() if not isinstance(v, str)})  # fail early
        self.system_metadata: dict = {}
        self._tensors: list[tuple[str, str, tuple[int, ...], int, int]] = []
        self._checksums: dict[str, str] = {}
        self._size = 0
        local = local_path(path)
        folder = os.path.dirname(os.path.abspath(local)) if local is not None else None
        self._spool = tempfile.TemporaryFile(dir=folder, prefix=".lazystore-spool-")
        try:
            self._sink = open_sink(path, storage_options)
        except BaseException:
            self._spool.close()
            raise
        self.path = getattr(self._sink, "path", path)

    def add(self, name: str, array, *, compression=None) -> None:
        arr = np.asarray(array)
        spec = spec_for(arr.dtype)
        arr = np.asarray(arr, dtype=spec.dtype, order="C")
        self.add_pieces(name, [arr], dtype=spec.dtype, shape=arr.shape)

    def add_pieces(self, name: str, pieces, *, dtype, shape, compression=None) -> None:
        """Append one tensor given as its C-order bytes in pieces (as
        :meth:`lazystore.Writer.add_pieces`), spooled as they come."""
        if self._sink.closed:
            raise ClosedError(f"writer for {self.path} is closed")
        tensor_names.require_str(name)
        tensor_names.require_utf8(name)  # the header is JSON read as UTF-8
        if name == "__metadata__":
            raise InvalidInputError("'__metadata__' cannot name a tensor in a safetensors file")
        tensor_names.require_new(name, self._checksums)
        spec = spec_for(dtype)
        st_name = spec.safetensors
        if st_name is None:
            raise UnsupportedDtypeError(f"{name!r}: safetensors cannot store {spec.name} tensors")
        shape = tuple(shape)
        st_shape = to_safetensors_shape(spec, shape)  # refuses before a byte is spooled
        nbytes = math.prod(shape) * spec.dtype.itemsize
        hasher = new_hasher()
        spooled = 0
        try:
            for piece in pieces:
                data = as_bytes(piece)
                self._spool.write(data.data)  # its bytes, as a memoryview
                hasher.update(data)
                spooled += len(data)
            if spooled != nbytes:
                raise InvalidInputError(f"{name!r}: the pieces hold {spooled} bytes; dtype x shape needs {nbytes}")
        except BaseException:
            self.abort()  # the spool holds part of a tensor: the file cannot be finished
            raise
        self._checksums[name] = f"{hasher.intdigest():016x}"
        self._tensors.append((name, st_name, st_shape, self._size, self._size + nbytes))
        self._size += nbytes

    def close(self) -> None:
        if self._sink.closed:
            return
        try:
            header = self._header(with_checksums=True)
            if len(header) > MAX_HEADER_BYTES:
                header = self._header(with_checksums=False)
            if len(header) > MAX_HEADER_BYTES:
                raise InvalidInputError(f"safetensors header of {len(header)} bytes exceeds the "
                                        f"{MAX_HEADER_BYTES}-byte limit (too many tensors or too much metadata)")
            problem = strict_json.size_problem(header)  # what lazystore's reader would refuse
            if problem is not None:
                raise InvalidInputError(f"safetensors header too large: {problem}")
            self._sink.write(struct.pack("<Q", len(header)))
            self._sink.write(header)
            self._spool.seek(0)
            block = bytearray(_COPY_BLOCK)  # one buffer, reused: memory stays bounded
            while n := self._spool.readinto(block):
                self._sink.write(memoryview(block)[:n])
            self._sink.commit()
        except BaseException:
            self.abort()
            raise
        finally:
            self._spool.close()

    def abort(self) -> None:
        self._sink.abort()
        self._spool.close()


    def _header(self, *, with_checksums: bool) -> bytes:
        meta = {k: v for k, v in self.metadata.items() if isinstance(v, str)}
        other = {k: v for k, v in self.metadata.items() if not isinstance(v, str)}
        if other:
            meta[METADATA_KEY] = _json_text(other)
        if self.system_metadata:
            meta[SYSTEM_KEY] = _json_text(self.system_metadata)
        if self.system_metadata.get(frameworks.FRAMEWORK_KEY) == frameworks.TORCH \
                and frameworks.FORMAT_KEY not in self.metadata:
            # What safetensors files from torch say (transformers before 5 requires it).
            meta[frameworks.FORMAT_KEY] = frameworks.TORCH_FORMAT
            meta[ADDED_KEY] = _json_text([frameworks.FORMAT_KEY])
        if with_checksums:
            meta[CHECKSUMS_KEY] = _json_text(self._checksums)
        header: dict = {"__metadata__": meta} if meta else {}
        for name, dtype, shape, begin, end in self._tensors:
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}
        text = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return text + b" " * (-len(text) % 8)  # data starts 8-byte aligned, as safetensors writes it


def _json_text(value) -> str:
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"metadata must be JSON-serialisable (no NaN/inf): {exc}") from None
