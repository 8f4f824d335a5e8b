"""The validated index: what a file says about its tensors.

The index is untrusted input. ``Index.parse`` decodes it in bulk into numpy
arrays and checks every field with vectorised comparisons before any of it
is used, so a file of 100,000 tensors opens without building 100,000 Python
objects (only the key strings, which a Mapping needs) and a hostile file gets
a FormatError without any allocation sized by its claims.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .chunking import ChunkGrid, chunk_raw_nbytes
from .dtypes import BY_CODE, ITEMSIZE_BY_CODE
from .checksum import all_zero, check
from .errors import FormatError

MAX_NDIM = 64  # numpy's own limit
# A zstd frame expands at most 32768-fold (a 4-byte RLE block yields 128 KiB),
# so a chunk claiming more than this per stored byte is lying.
MAX_EXPANSION = 1 << 15

CODEC_NAMES = {0: None, 1: "zstd"}
_KNOWN_CODEC = np.zeros(256, dtype=bool)  # a lookup table beats np.isin on small arrays
_KNOWN_CODEC[list(CODEC_NAMES)] = True


@dataclass(frozen=True)
class TensorInfo:
    """What the index says about one tensor; no data is read to build it."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int  # decoded size
    stored_nbytes: int  # bytes in the file, padding excluded
    compression: str | None  # None for raw tensors, else the codec name
    chunk_count: int
    offset: int  # absolute file offset of the first stored byte

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class Index:
    """Validated arrays of a file's index plus its names and metadata."""

    def __init__(self, raw: fmt.RawIndex, names: list[str], positions: dict[str, int],
                 metadata: dict, dims_start: np.ndarray, chunk_start: np.ndarray,
                 chunk_offsets: np.ndarray, chunk_raw: np.ndarray, index_offset: int):
        self.entries = raw.entries
        self.dims = raw.dims
        self.chunks = raw.chunks
        self.alignment = raw.alignment
        self.names = names
        self.positions = positions
        # The user's metadata, and lazystore's own reserved entries apart.
        self.metadata = {k: v for k, v in metadata.items() if not k.startswith(fmt.RESERVED_METADATA_PREFIX)}
        self.system_metadata = {k: v for k, v in metadata.items() if k.startswith(fmt.RESERVED_METADATA_PREFIX)}
        self.dims_start = dims_start
        self.chunk_start = chunk_start
        self.chunk_offsets = chunk_offsets  # absolute file offset of every chunk
        self.chunk_raw = chunk_raw  # decoded length of every chunk
        self.index_offset = index_offset

    # -- per-tensor accessors (built on demand) ----------------------------

    def shape(self, pos: int) -> tuple[int, ...]:
        start = int(self.dims_start[pos])
        return tuple(int(d) for d in self.dims[start : start + int(self.entries["ndim"][pos])])

    def dtype(self, pos: int) -> np.dtype:
        return BY_CODE[int(self.entries["dtype"][pos])].dtype

    def grid(self, pos: int) -> ChunkGrid:
        e = self.entries[pos]
        return ChunkGrid(self.shape(pos), self.dtype(pos).itemsize, int(e["chunk_axis"]), int(e["chunk_extent"]))

    def chunk_range(self, pos: int) -> tuple[int, int]:
        start = int(self.chunk_start[pos])
        return start, start + int(self.entries["chunk_count"][pos])

    def info(self, pos: int) -> TensorInfo:
        e = self.entries[pos]
        return TensorInfo(
            name=self.names[pos],
            dtype=self.dtype(pos),
            shape=self.shape(pos),
            nbytes=int(e["nbytes"]),
            stored_nbytes=int(e["stored_nbytes"]),
            compression=CODEC_NAMES[int(e["codec"])],
            chunk_count=int(e["chunk_count"]),
            offset=int(e["data_offset"]),
        )

    def padding_after(self, pos: int) -> tuple[int, int]:
        """The zero padding a tensor owns: from its end to the next aligned offset."""
        end = int(self.entries["data_offset"][pos]) + int(self.entries["stored_nbytes"][pos])
        return end, fmt.align_up(end, self.alignment)

    @property
    def data_start(self) -> int:
        return fmt.align_up(fmt.PREAMBLE.size, self.alignment)

    # -- parsing -------------------------------------------------------------

    @classmethod
    def parse(cls, buf, index_offset: int) -> "Index":
        raw = fmt.decode_index(buf)
        names, positions = _decode_keys(raw.keys, len(raw.entries))
        check = _Checker(names)
        e = raw.entries
        n = len(e)

        check.each(e["reserved"].any(axis=1), "reserved entry bytes are not zero")
        itemsize = ITEMSIZE_BY_CODE[e["dtype"]]
        check.each(itemsize == 0, "unknown dtype code")
        codec, planes = e["codec"], e["planes"].astype(np.uint64)
        check.each(~_KNOWN_CODEC[codec], "unknown codec")
        check.each((codec == 0) & (planes != 1), "raw tensor with byte planes")
        check.each((codec == 1) & (planes != 1) & (planes != itemsize), "invalid byte plane count")

        # Shapes: products over each tensor's slice of the flat dims array,
        # so memory stays proportional to the index, whatever the ndims.
        ndim = e["ndim"].astype(np.int64)
        check.each(ndim > MAX_NDIM, f"more than {MAX_NDIM} dimensions")
        if int(ndim.sum()) != len(raw.dims):
            raise FormatError(f"shapes need {int(ndim.sum())} dimensions but the index holds {len(raw.dims)}")
        dims_start = np.cumsum(ndim) - ndim
        shapes = _Shapes(raw.dims, dims_start, ndim)
        check.each(shapes.max_dim() >= 1 << 62, "absurd dimension")
        # Float products catch overflow; below 2**62 the integer product is
        # exact. Zero-size tensors count their other dimensions too, so no
        # shape can overflow once a reader reshapes with it.
        check.each(shapes.product(ndim, as_float=True, zero_as_one=True) >= 2.0**62, "shape overflows")
        check.each(shapes.product(ndim, as_float=True) * itemsize >= 2.0**62, "tensor size overflows")
        elements = shapes.product(ndim)
        nbytes = elements * itemsize
        check.each(nbytes != e["nbytes"], "byte size does not match dtype x shape")

        # Chunk grid: a chunk count and per-chunk sizes follow from the shape.
        axis = e["chunk_axis"].astype(np.int64)
        extent = e["chunk_extent"]
        check.each(axis >= np.maximum(ndim, 1), "chunk axis out of range")
        axis_len = shapes.dim(axis, ndim)
        prefix = shapes.product(axis)
        rows = prefix * axis_len
        inner = np.where(rows > 0, elements // np.maximum(rows, 1), 0) * itemsize
        empty = nbytes == 0
        check.each(empty & ((extent != 0) | (axis != 0) | (e["chunk_count"] != 0)), "empty tensor with chunks")
        check.each(~empty & ((extent == 0) | (extent > axis_len)), "chunk extent out of range")
        safe_extent = np.maximum(extent, 1)
        expected_chunks = np.where(empty, 0, prefix * ((axis_len + safe_extent - 1) // safe_extent))
        check.each(e["chunk_count"] != expected_chunks, "chunk count does not match the chunk grid")
        # Bounding each count first keeps the uint64 sum from wrapping around.
        check.each(e["chunk_count"] > len(raw.chunks), "more chunks than the index holds")
        if int(e["chunk_count"].sum()) != len(raw.chunks):
            raise FormatError(f"tensors have {int(e['chunk_count'].sum())} chunks but the index holds {len(raw.chunks)}")

        # Chunks: stored lengths must fit the data region and agree with the codec.
        chunk_start = (np.cumsum(e["chunk_count"]) - e["chunk_count"]).astype(np.int64)
        raw_len = chunk_raw_nbytes(axis_len, safe_extent, inner, e["chunk_count"])
        stored = raw.chunks["stored_nbytes"]
        owner = np.repeat(np.arange(n), e["chunk_count"].astype(np.int64))
        check.chunks(stored > index_offset, owner, "chunk larger than the file")
        is_raw = codec[owner] == 0
        check.chunks(is_raw & (stored != raw_len), owner, "raw chunk length differs from its decoded length")
        header = 4 * planes[owner]
        check.chunks(~is_raw & (stored < header), owner, "compressed chunk shorter than its plane header")
        check.chunks(~is_raw & (raw_len // np.uint64(MAX_EXPANSION) > stored), owner, "compressed chunk claims an impossible expansion")

        # Layout: tensors are packed in index order, each at the next aligned
        # offset, and the index follows the last one; no byte is unaccounted for.
        running = np.concatenate([np.zeros(1, np.uint64), np.cumsum(stored, dtype=np.uint64)])
        if np.any(running[1:] < running[:-1]) or (len(stored) and running[-1] > index_offset):
            raise FormatError("chunk lengths add up to more than the file")
        per_tensor = running[chunk_start + e["chunk_count"].astype(np.int64)] - running[chunk_start]
        check.each(per_tensor != e["stored_nbytes"], "stored size differs from the sum of its chunks")
        offset = e["data_offset"]
        check.each(offset > index_offset, "data offset beyond the index")
        ends = offset + np.minimum(e["stored_nbytes"], index_offset)
        align = np.uint64(raw.alignment)
        next_start = (ends + align - np.uint64(1)) // align * align
        first = np.array([fmt.align_up(fmt.PREAMBLE.size, raw.alignment)], dtype=np.uint64)
        expected_offset = np.concatenate([first, next_start[:-1]])
        check.each(offset != expected_offset, "data offset is not where the previous tensor ends")
        expected_index = int(next_start[-1]) if n else fmt.align_up(fmt.PREAMBLE.size, raw.alignment)
        if expected_index != index_offset:
            raise FormatError(f"the index starts at {index_offset} but the data ends at {expected_index}")

        chunk_offsets = offset[owner] + (running[:-1] - running[chunk_start[owner]]) if n else running[:0]
        metadata = _decode_metadata(raw.metadata)
        return cls(raw, names, positions, metadata, dims_start, chunk_start, chunk_offsets, raw_len, index_offset)


class _Shapes:
    """Per-tensor reductions over the concatenated dims of every shape.

    Each shape is laid out behind a leading 1 so no segment is empty (numpy's
    reduceat treats empty segments specially); memory stays linear in the
    index size."""

    def __init__(self, dims: np.ndarray, dims_start: np.ndarray, ndim: np.ndarray):
        n = len(ndim)
        self.seg = dims_start + np.arange(n)  # where each tensor's leading 1 sits
        self.ext = np.ones(len(dims) + n + 1, dtype=np.uint64)  # +1: a final bound for reduceat
        mask = np.ones(len(self.ext), dtype=bool)
        mask[self.seg] = False
        mask[-1] = False
        self.ext[mask] = dims

    def product(self, count: np.ndarray, *, as_float: bool = False, zero_as_one: bool = False) -> np.ndarray:
        """Product of each tensor's first ``count`` dimensions."""
        values = self.ext.astype(np.float64) if as_float else self.ext
        if zero_as_one:
            values = np.maximum(values, 1)
        if not len(self.seg):
            return values[:0]
        bounds = np.empty(2 * len(self.seg), dtype=np.int64)
        bounds[0::2] = self.seg
        bounds[1::2] = self.seg + 1 + count
        return np.multiply.reduceat(values, bounds)[::2]

    def max_dim(self) -> np.ndarray:
        if not len(self.seg):
            return self.ext[:0]
        return np.maximum.reduceat(self.ext[:-1], self.seg)

    def dim(self, axis: np.ndarray, ndim: np.ndarray) -> np.ndarray:
        """Each tensor's length along ``axis`` (1 for 0-d tensors)."""
        at = self.seg + 1 + np.minimum(axis, np.maximum(ndim - 1, 0))
        return np.where(ndim > 0, self.ext[at], 1).astype(np.uint64)


class _Checker:
    """Turns a failed vectorised check into a FormatError naming a tensor."""

    def __init__(self, names: list[str]):
        self.names = names

    def each(self, bad: np.ndarray, problem: str) -> None:
        if bad.any():
            pos = int(np.argmax(bad))
            raise FormatError(f"corrupt index: tensor {self.names[pos]!r}: {problem}")

    def chunks(self, bad: np.ndarray, owner: np.ndarray, problem: str) -> None:
        if bad.any():
            pos = int(owner[int(np.argmax(bad))])
            raise FormatError(f"corrupt index: tensor {self.names[pos]!r}: {problem}")


def _decode_keys(blob: bytes, count: int) -> tuple[list[str], dict[str, int]]:
    if blob.count(0) != count or (blob and blob[-1] != 0):
        raise FormatError(f"corrupt index: key table does not hold {count} NUL-terminated keys")
    try:
        text = blob[:-1].decode("utf-8") if count else ""
    except UnicodeDecodeError as exc:
        raise FormatError(f"corrupt index: keys are not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    names = text.split("\0") if count else []
    positions = dict(zip(names, range(count)))
    if len(positions) != count:
        seen: set[str] = set()
        dup = next(k for k in names if k in seen or seen.add(k))
        raise FormatError(f"corrupt index: duplicate key {dup!r}")
    return names, positions


def _decode_metadata(blob: bytes) -> dict:
    if not blob:
        return {}
    try:
        # The C parser guards its recursion, so absurd nesting is a
        # RecursionError here, never a crash.
        value = json.loads(blob.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt metadata: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("corrupt metadata: not a JSON object")
    return value


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} overflows a float")
    return value


def read_index(source) -> tuple[Index, tuple[int, int]]:
    """Find, check and parse a source's index with at most two reads.

    The first read takes the file's tail, which holds the trailer and, for
    all but huge indexes, the index too; a second read fetches a larger
    index. The preamble is checked too when it is already at hand (a mapped
    file, or a file small enough to be in the tail); otherwise ``verify()``
    checks it.
    """
    size = source.size
    smallest = fmt.PREAMBLE.size + fmt.TRAILER.size
    if size < smallest:
        raise FormatError(f"not a lazystore file: {size} bytes is shorter than the smallest possible file ({smallest} bytes)")
    tail_start = 0 if source.mapped() is not None else max(0, size - fmt.TAIL_READ_BYTES)
    tail = source.read(tail_start, size)
    if tail_start == 0:
        fmt.decode_preamble(tail)  # a wrong magic is best reported from the start
    trailer = fmt.decode_trailer(tail, size)
    if trailer.index_offset >= tail_start:
        lo = trailer.index_offset - tail_start
        buf = tail[lo : lo + trailer.index_length]
    else:
        buf = source.read(trailer.index_offset, trailer.index_offset + trailer.index_length)
    check(buf, trailer.index_checksum, "index")
    index = Index.parse(buf, trailer.index_offset)
    version = (trailer.major, trailer.minor)
    if tail_start == 0:
        check_preamble(tail, index, version)
    return index, version


def check_preamble(head, index: Index, version: tuple[int, int]) -> None:
    """The preamble must match the trailer, and pad with zeros up to the data."""
    if fmt.decode_preamble(head) != version:
        raise FormatError("the format versions in the preamble and trailer differ")
    if not all_zero(head[fmt.PREAMBLE.size : index.data_start]):
        raise FormatError("padding after the preamble is not zero")
