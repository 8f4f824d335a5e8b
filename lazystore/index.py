"""The validated index: what a file says about its tensors.

The index is untrusted input. ``Index.parse`` decodes it in bulk into numpy
arrays and checks every field with vectorised comparisons before any of it
is used, so a file of 100,000 tensors opens without building 100,000 Python
objects (only the key strings, which a Mapping needs) and a hostile file gets
a FormatError without any allocation sized by its claims.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import format as fmt
from .chunking import ChunkGrid, chunk_owners, chunk_raw_nbytes
from .dtypes import BY_CODE, ITEMSIZE_BY_CODE
from .checksum import all_zero, check
from . import strict_json
from .errors import FormatError

MAX_NDIM = 64  # numpy's own limit
# A zstd frame expands at most 32768-fold (a 4-byte RLE block yields 128 KiB),
# so a chunk claiming more than this per stored byte is lying.
MAX_EXPANSION = 1 << 15

CODEC_NAMES = {0: None, 1: "zstd"}


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
                 chunk_offsets: np.ndarray, chunk_raw: np.ndarray, index_offset: int,
                 *, kind: str = "lazystore", checksums_known: bool = True, unverifiable: str | None = None):
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
        # The format the index was read from ("lazystore", "safetensors"):
        # only for messages and for :meth:`check_head`; reads never look at it.
        self.kind = kind
        # False when the file records no checksums (a safetensors file not
        # written by lazystore): reads skip checks, and verify() cannot run,
        # for the reason ``unverifiable`` gives.
        self.checksums_known = checksums_known
        self.unverifiable = unverifiable

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

    def check_head(self, source, version) -> None:
        """Check the bytes before the first tensor that no chunk covers: a
        lazystore file's preamble and its padding. A foreign file's header
        is validated whole when it is opened, and nothing else precedes its
        data."""
        if self.kind == "lazystore":
            check_preamble(source.read(0, self.data_start), self, version)

    # -- parsing -------------------------------------------------------------

    @classmethod
    def parse(cls, buf, index_offset: int) -> "Index":
        raw = fmt.decode_index(buf)
        names, positions = _decode_keys(raw.keys, len(raw.entries))
        v = _Validation(raw, names, index_offset)
        v.codes()
        v.shapes()
        v.grid()
        v.chunks()
        v.layout()
        metadata = _decode_metadata(raw.metadata)
        return cls(raw, names, positions, metadata, v.dims_start, v.first_chunk, v.chunk_offsets, v.raw_len, index_offset)

    @classmethod
    def foreign(cls, raw: fmt.RawIndex, names: list[str], metadata: dict, data_end: int, *, kind: str,
                checksums_known: bool, unverifiable: str | None = None) -> "Index":
        """The index of another format's file, built by its parser (see
        :mod:`lazystore.formats`) as lazystore's own arrays.

        Every check of :meth:`parse` runs but the lazystore layout rule
        (tensors packed at aligned offsets, then the index): the format's
        parser has checked its own layout, and here each tensor's bytes need
        only lie inside ``[0, data_end)``. ``raw.chunks["checksum"]`` is used
        only when ``checksums_known``."""
        positions = dict(zip(names, range(len(names))))
        if len(positions) != len(names):
            raise FormatError("corrupt index: duplicate tensor names")
        v = _Validation(raw, names, data_end)
        v.codes()
        v.shapes()
        v.grid()
        v.chunks()
        v.placement()
        return cls(raw, names, positions, metadata, v.dims_start, v.first_chunk, v.chunk_offsets, v.raw_len,
                   data_end, kind=kind, checksums_known=checksums_known, unverifiable=unverifiable)


class _Validation:
    """The checks of ``Index.parse``, in the order they depend on each other.

    Every step is a handful of vectorised comparisons over all tensors (or
    all chunks) at once, so the cost of opening grows with the index's size
    in numpy, not in Python, and never with what the fields claim.
    """

    def __init__(self, raw: fmt.RawIndex, names: list[str], index_offset: int):
        self.raw = raw
        self.e = raw.entries
        self.check = _Checker(names)
        self.index_offset = index_offset

    def codes(self) -> None:
        """The small fields: dtype, codec, ndim, chunk axis, planes, reserved.

        They pack into the entry's last 8 bytes, and a file has few distinct
        combinations of them (often one), so each distinct value is checked
        in plain Python instead of with a dozen array operations."""
        e = self.e
        tail = e.view("<u8").reshape(-1, fmt.ENTRY_DTYPE.itemsize // 8)[:, 5]
        distinct = tail[:1] if len(tail) and (tail == tail[0]).all() else np.unique(tail)
        for value in distinct.tolist():
            problem = _small_fields_problem(value)
            if problem:
                self.check.each(tail == value, problem)
        self.check.raise_first()
        self.itemsize = ITEMSIZE_BY_CODE[e["dtype"]]
        self.codec, self.planes = e["codec"], e["planes"].astype(np.uint64)

    def shapes(self) -> None:
        e, check = self.e, self.check
        ndim = e["ndim"].astype(np.int64)
        if int(ndim.sum()) != len(self.raw.dims):
            raise FormatError(f"shapes need {int(ndim.sum())} dimensions but the index holds {len(self.raw.dims)}")
        self.dims_start = np.cumsum(ndim) - ndim
        self.axis = e["chunk_axis"].astype(np.int64)
        shapes = _Shapes(self.raw.dims, self.dims_start, ndim)
        # Split every shape at the chunk axis: prefix = dims before it,
        # suffix = dims from it on. Float products catch overflow first;
        # below 2**62 the integer ones are exact. Zeros count as ones there,
        # so no shape can overflow once a reader reshapes with it.
        prefix_f, suffix_f = shapes.split_products(self.axis, as_float=True)
        check.each(prefix_f * suffix_f * self.itemsize >= 2.0**62, "tensor size overflows")
        self.prefix, suffix = shapes.split_products(self.axis)
        self.nbytes = self.prefix * suffix * self.itemsize
        check.each(self.nbytes != e["nbytes"], "byte size does not match dtype x shape")
        check.raise_first()
        self.axis_len = shapes.dim(self.axis, ndim)
        self.inner = np.where(self.axis_len > 0, suffix // np.maximum(self.axis_len, 1), 0) * self.itemsize

    def grid(self) -> None:
        e, check = self.e, self.check
        extent, count = e["chunk_extent"], e["chunk_count"]
        empty = self.nbytes == 0
        check.each(empty & ((extent != 0) | (self.axis != 0) | (count != 0)), "empty tensor with chunks")
        check.each(~empty & ((extent == 0) | (extent > self.axis_len)), "chunk extent out of range")
        self.extent = np.maximum(extent, 1)
        expected = np.where(empty, 0, self.prefix * ((self.axis_len + self.extent - 1) // self.extent))
        check.each(count != expected, "chunk count does not match the chunk grid")
        # Bounding each count first keeps the uint64 sum from wrapping around.
        check.each(count > len(self.raw.chunks), "more chunks than the index holds")
        check.raise_first()
        if int(count.sum()) != len(self.raw.chunks):
            raise FormatError(f"tensors have {int(count.sum())} chunks but the index holds {len(self.raw.chunks)}")

    def chunks(self) -> None:
        check = self.check
        self.owner, self.first_chunk = chunk_owners(self.e["chunk_count"])
        owner = self.owner
        self.raw_len = chunk_raw_nbytes(self.axis_len, self.extent, self.inner, owner, self.first_chunk)
        stored = self.raw.chunks["stored_nbytes"]
        is_raw = self.codec[owner] == 0
        check.chunks(is_raw & (stored != self.raw_len), owner, "raw chunk length differs from its decoded length")
        check.chunks(~is_raw & (stored < 4 * self.planes[owner]), owner, "compressed chunk shorter than its plane header")
        check.chunks(~is_raw & (self.raw_len // np.uint64(MAX_EXPANSION) > stored), owner,
                     "compressed chunk claims an impossible expansion")
        check.raise_first()
        # Running sum of stored lengths; a wrap-around shows as a decrease.
        self.running = np.zeros(len(stored) + 1, dtype=np.uint64)
        np.cumsum(stored, out=self.running[1:])
        if (self.running[1:] < self.running[:-1]).any() or self.running[-1] > self.index_offset:
            raise FormatError("chunk lengths add up to more than the file")

    def layout(self) -> None:
        """Tensors are packed in index order, each at the next aligned offset,
        and the index follows the last one: no byte is unaccounted for."""
        e, check, running, start = self.e, self.check, self.running, self.first_chunk
        per_tensor = running[start + e["chunk_count"].astype(np.int64)] - running[start]
        check.each(per_tensor != e["stored_nbytes"], "stored size differs from the sum of its chunks")
        offset = e["data_offset"]
        check.each(offset > self.index_offset, "data offset beyond the index")
        align = np.uint64(self.raw.alignment)
        first = fmt.align_up(fmt.PREAMBLE.size, self.raw.alignment)
        next_start = (offset + per_tensor + align - np.uint64(1)) // align * align
        expected = np.empty(len(e), dtype=np.uint64)
        expected[:1] = first
        expected[1:] = next_start[:-1]
        check.each(offset != expected, "data offset is not where the previous tensor ends")
        check.raise_first()
        data_end = int(next_start[-1]) if len(e) else first
        if data_end != self.index_offset:
            raise FormatError(f"the index starts at {self.index_offset} but the data ends at {data_end}")
        self.chunk_offsets = offset[self.owner] + (running[:-1] - running[start[self.owner]])


    def placement(self) -> None:
        """For a foreign file: each tensor's chunks lie back to back inside
        the data region (its own parser checked how tensors are placed)."""
        e, check, running, start = self.e, self.check, self.running, self.first_chunk
        per_tensor = running[start + e["chunk_count"].astype(np.int64)] - running[start]
        check.each(per_tensor != e["stored_nbytes"], "stored size differs from the sum of its chunks")
        offset = e["data_offset"]
        end = np.uint64(self.index_offset)
        check.each((offset > end) | (per_tensor > end - np.minimum(offset, end)), "data beyond the end of the file")
        check.raise_first()
        self.chunk_offsets = offset[self.owner] + (running[:-1] - running[start[self.owner]])


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

    def split_products(self, axis: np.ndarray, *, as_float: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Per tensor: the product of the dims before ``axis``, and of the
        dims from ``axis`` on (as floats with zeros counted as ones, for
        overflow checks)."""
        values = np.maximum(self.ext.astype(np.float64), 1.0) if as_float else self.ext
        if not len(self.seg):
            return values[:0], values[:0]
        bounds = np.empty(2 * len(self.seg), dtype=np.int64)
        bounds[0::2] = self.seg
        bounds[1::2] = self.seg + 1 + axis
        # reduceat multiplies each [bound, next bound) run: the dims before
        # the axis (with the leading 1), then the dims from the axis up to
        # the next tensor's leading 1. For a 0-d tensor the second run is
        # empty and numpy returns the element at the bound, which is that
        # next leading 1: still the right product.
        products = np.multiply.reduceat(values, bounds)
        return products[0::2], products[1::2]

    def dim(self, axis: np.ndarray, ndim: np.ndarray) -> np.ndarray:
        """Each tensor's length along ``axis`` (1 for 0-d tensors)."""
        at = self.seg + 1 + np.minimum(axis, np.maximum(ndim - 1, 0))
        return np.where(ndim > 0, self.ext[at], 1).astype(np.uint64)


class _Checker:
    """Collects a step's vectorised checks, then raises a FormatError naming
    a tensor for the first that failed.

    Numpy calls on small arrays cost microseconds each, so a step's masks
    are tested with one reduction rather than one ``any()`` apiece. A step
    must call ``raise_first`` before it computes anything that relies on its
    checks having passed.
    """

    def __init__(self, names: list[str]):
        self.names = names
        self._pending: list[tuple[np.ndarray, np.ndarray | None, str]] = []

    def each(self, bad: np.ndarray, problem: str) -> None:
        self._pending.append((bad, None, problem))

    def chunks(self, bad: np.ndarray, owner: np.ndarray, problem: str) -> None:
        """A per-chunk check; ``owner`` maps chunks to tensors for the message."""
        self._pending.append((bad, owner, problem))

    def raise_first(self) -> None:
        pending, self._pending = self._pending, []
        by_size: dict[int, list[np.ndarray]] = {}
        for bad, _, _ in pending:
            by_size.setdefault(len(bad), []).append(bad)
        if not any(np.logical_or.reduce(masks).any() for masks in by_size.values()):
            return
        for bad, owner, problem in pending:
            if bad.any():
                pos = int(np.argmax(bad))
                pos = pos if owner is None else int(owner[pos])
                raise FormatError(f"corrupt index: tensor {self.names[pos]!r}: {problem}")


def _small_fields_problem(tail: int) -> str | None:
    """What is wrong with an entry's packed small fields, if anything."""
    dtype, codec, ndim, axis, planes = (tail >> shift & 0xFF for shift in (0, 8, 16, 24, 32))
    itemsize = int(ITEMSIZE_BY_CODE[dtype])
    if tail >> 40:
        return "reserved entry bytes are not zero"
    if not itemsize:
        return "unknown dtype code"
    if codec not in CODEC_NAMES:
        return "unknown codec"
    if codec == 0 and planes != 1:
        return "raw tensor with byte planes"
    if codec == 1 and planes not in (1, itemsize):
        return "invalid byte plane count"
    if ndim > MAX_NDIM:
        return f"more than {MAX_NDIM} dimensions"
    if axis >= max(ndim, 1):
        return "chunk axis out of range"
    return None


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
        value = strict_json.loads(blob, unique_keys=False)  # format.md: the last duplicate wins
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"corrupt metadata: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError("corrupt metadata: not a JSON object")
    return value




def read_tail(source) -> tuple[int, memoryview]:
    """``(start, bytes)`` of the first read of :func:`read_index`: the whole
    of a mapped file (free), else the last TAIL_READ_BYTES of the source."""
    size = source.size
    tail_start = 0 if source.mapped() is not None else max(0, size - fmt.TAIL_READ_BYTES)
    return tail_start, source.read(tail_start, size)


def read_index(source, tail: tuple[int, memoryview] | None = None) -> tuple[Index, tuple[int, int]]:
    """Find, check and parse a source's index with at most two reads.

    The first read takes the file's tail, which holds the trailer and, for
    all but huge indexes, the index too; a second read fetches a larger
    index. The preamble is checked too when it is already at hand (a mapped
    file, or a file small enough to be in the tail); otherwise ``verify()``
    checks it. ``tail`` is :func:`read_tail`'s result when the caller has
    already read it (to tell the format apart), saving the read.
    """
    size = source.size
    smallest = fmt.PREAMBLE.size + fmt.TRAILER.size
    if size < smallest:
        raise FormatError(f"not a lazystore file: {size} bytes is shorter than the smallest possible file ({smallest} bytes)")
    tail_start, tail = tail if tail is not None else read_tail(source)
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
