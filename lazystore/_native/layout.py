"""Bytes only: the constants and fixed structures of format v1.

File layout (docs/format.md is the normative spec)::

    preamble (16 bytes) | zero padding | tensor data ... | index | trailer (40 bytes)

Data comes first and the index last so a writer can stream tensors one at a
time without knowing every size up front; the fixed-size trailer says where
the index is, so a reader finds it with one read of the file's tail (two if
the index is larger than that read).

This module encodes and decodes those structures and checks that the index's
sections add up; what the index *says* is validated in ``index.py``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lazystore._core.checksum import all_zero
from lazystore._core.reserved_keys import RESERVED_METADATA_PREFIX  # noqa: F401 - the format's constant, named here too
from lazystore._core.short_reads import need
from lazystore.errors import FormatError, UnsupportedVersionError

MAGIC = b"\x89LZY\r\n\x1a\n"  # like PNG's: catches 7-bit and newline mangling
FORMAT_MAJOR = 1
# The newest minor version this package reads and writes (1.1 added dtype
# codes 18-22, 1.2 codec 2: tensors stored as deltas against a base file,
# 1.3 codec 3: deltas against a base identified by its content, 1.4 chunk
# digests and sealed codecs, 1.5 codec 4: float planes with a Huffman-coded
# exponent, and its sealed twin 132).
# A writer writes the oldest minor its file needs: BASE_MINOR unless a
# tensor's dtype or codec is newer (docs/format.md §14), so a file that an
# older 1.x reader can read also says it is for that reader.
FORMAT_MINOR = 5
BASE_MINOR = 0
# The newest minor a file without delta tensors can need (its dtypes'):
# what an upload, which cannot rewrite its preamble, states.
DTYPE_MINOR = 1
TRUST_MINOR = 4  # the minor that added chunk digests and sealed (encrypted) codecs: issue 28
EXPONENT_MINOR = 5  # the minor that added codec 4 (Huffman-coded exponents) and codec 132: issue 29
DEFAULT_ALIGNMENT = 64  # tensor data starts here so mmap'd views are aligned
MAX_INDEX_BYTES = 1 << 30  # refuse absurd indexes before allocating them
TAIL_READ_BYTES = 64 << 10  # one read of the tail usually holds the whole index

PREAMBLE = struct.Struct("<8sHHI")  # magic, major, minor, reserved
TRAILER = struct.Struct("<QQQHHI8s")  # index offset, length, xxh3; major, minor, reserved; magic
INDEX_HEADER = struct.Struct("<IIQQQQQIIQ")
# entry_size, chunk_record_size, tensor_count, dims_count, chunk_count,
# keys_nbytes, metadata_nbytes, alignment, reserved, reserved

ENTRY_DTYPE = np.dtype(
    [
        ("data_offset", "<u8"),
        ("stored_nbytes", "<u8"),
        ("nbytes", "<u8"),
        ("chunk_count", "<u8"),
        ("chunk_extent", "<u8"),
        ("dtype", "u1"),
        ("codec", "u1"),
        ("ndim", "u1"),
        ("chunk_axis", "u1"),
        ("planes", "u1"),
        ("reserved", "u1", (3,)),
    ]
)
CHUNK_DTYPE = np.dtype([("stored_nbytes", "<u8"), ("checksum", "<u8")])
# Format 1.3 appends a field to chunk records, in files with codec-3 tensors:
# the xxh3 of the decoded bytes of the base chunk a delta chunk was coded
# against (0 for any other chunk). Other files keep 16-byte records.
WIDE_CHUNK_DTYPE = np.dtype([("stored_nbytes", "<u8"), ("checksum", "<u8"), ("base_checksum", "<u8")])
# Format 1.4 appends, in files that declare chunk digests (the member
# __lazystore_digest__), the 32-byte digest of each chunk's stored bytes
# (56-byte records), and in such files with codec-3 tensors the digest of
# the decoded base chunk a delta chunk was coded against (88 bytes).
DIGEST_CHUNK_DTYPE = np.dtype(WIDE_CHUNK_DTYPE.descr + [("digest", "u1", (32,))])
DELTA_DIGEST_CHUNK_DTYPE = np.dtype(DIGEST_CHUNK_DTYPE.descr + [("base_digest", "u1", (32,))])
# The records a writer writes, narrowest first; any other is written as CHUNK_DTYPE.
RECORD_DTYPES = (CHUNK_DTYPE, WIDE_CHUNK_DTYPE, DIGEST_CHUNK_DTYPE, DELTA_DIGEST_CHUNK_DTYPE)
DIM_DTYPE = np.dtype("<u8")

assert PREAMBLE.size == 16 and TRAILER.size == 40 and INDEX_HEADER.size == 64
assert ENTRY_DTYPE.itemsize == 48 and CHUNK_DTYPE.itemsize == 16 and WIDE_CHUNK_DTYPE.itemsize == 24
assert DIGEST_CHUNK_DTYPE.itemsize == 56 and DELTA_DIGEST_CHUNK_DTYPE.itemsize == 88


def align_up(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _check_version(major: int, minor: int, where: str) -> None:
    if major > FORMAT_MAJOR:
        raise UnsupportedVersionError(
            f"file format version {major}.{minor} is newer than this lazystore "
            f"can read (format {FORMAT_MAJOR}.x); upgrade lazystore to read it"
        )
    if major < 1:
        raise FormatError(f"invalid format version {major}.{minor} in {where}")


# --- preamble -------------------------------------------------------------


def encode_preamble(minor: int = FORMAT_MINOR) -> bytes:
    return PREAMBLE.pack(MAGIC, FORMAT_MAJOR, minor, 0)


def decode_preamble(buf) -> tuple[int, int]:
    need(buf, PREAMBLE.size, "preamble")
    magic, major, minor, reserved = PREAMBLE.unpack_from(buf, 0)
    if magic != MAGIC:
        raise FormatError("not a lazystore file (bad magic at start of file)")
    _check_version(major, minor, "preamble")
    if reserved:
        raise FormatError("reserved preamble field is not zero")
    return major, minor


def check_preamble(head, data_start: int, version: tuple[int, int], head_version=None) -> None:
    """The preamble (decoded already when ``head_version`` is given) must
    match the trailer's version, and pad with zeros up to the data."""
    if (head_version or decode_preamble(head)) != version:
        raise FormatError("the format versions in the preamble and trailer differ")
    if not all_zero(head[PREAMBLE.size : data_start]):
        raise FormatError("padding after the preamble is not zero")


# --- trailer --------------------------------------------------------------


class Trailer(NamedTuple):
    index_offset: int
    index_length: int
    index_checksum: int
    major: int
    minor: int


def encode_trailer(t: Trailer) -> bytes:
    return TRAILER.pack(
        t.index_offset, t.index_length, t.index_checksum, t.major, t.minor, 0, MAGIC
    )


def decode_trailer(buf, file_size: int) -> Trailer:
    """Decode the trailer from the last TRAILER.size bytes of ``buf``."""
    need(buf, TRAILER.size, "trailer")
    fields = TRAILER.unpack_from(buf, len(buf) - TRAILER.size)
    offset, length, checksum, major, minor, reserved, magic = fields
    if magic != MAGIC:
        raise FormatError("not a lazystore file, or truncated (bad magic at end of file)")
    _check_version(major, minor, "trailer")
    if reserved:
        raise FormatError("reserved trailer field is not zero")
    if length > MAX_INDEX_BYTES:
        raise FormatError(f"index of {length} bytes exceeds the {MAX_INDEX_BYTES}-byte limit")
    if length < INDEX_HEADER.size or offset < PREAMBLE.size or offset + length + TRAILER.size != file_size:
        raise FormatError(
            f"index location (offset {offset}, length {length}) does not end at the "
            f"trailer of this {file_size}-byte file"
        )
    return Trailer(offset, length, checksum, major, minor)


# --- index ----------------------------------------------------------------


@dataclass
class RawIndex:
    """The index's sections as decoded arrays, not yet validated."""

    entries: np.ndarray  # ENTRY_DTYPE (fields beyond v1.0's are dropped)
    dims: np.ndarray  # DIM_DTYPE, every tensor's shape concatenated
    chunks: np.ndarray  # CHUNK_DTYPE, every tensor's chunks concatenated
    keys: bytes  # UTF-8 keys, each terminated by NUL
    metadata: bytes  # UTF-8 JSON object
    alignment: int
    # Each chunk record's base_checksum (format 1.3), where the records hold one.
    base_checksums: np.ndarray | None = None
    # Each chunk record's digest and base_digest (format 1.4), as (n, 32)
    # uint8 rows, where the records are wide enough to hold them.
    digests: np.ndarray | None = None
    base_digests: np.ndarray | None = None


def encode_index(
    entries: np.ndarray,
    dims: np.ndarray,
    chunks: np.ndarray,
    keys: bytes,
    metadata: bytes,
    alignment: int,
) -> bytes:
    """The index's bytes. ``chunks`` of one of RECORD_DTYPES give records
    of its size (24 bytes: format 1.3; 56 or 88: 1.4), of any other dtype
    the 16-byte ones of 1.0."""
    wide = chunks.dtype in RECORD_DTYPES
    header = INDEX_HEADER.pack(
        ENTRY_DTYPE.itemsize,
        chunks.dtype.itemsize if wide else CHUNK_DTYPE.itemsize,
        len(entries),
        len(dims),
        len(chunks),
        len(keys),
        len(metadata),
        alignment,
        0,
        0,
    )
    parts = [
        header,
        entries.astype(ENTRY_DTYPE, copy=False).tobytes(),
        dims.astype(DIM_DTYPE, copy=False).tobytes(),
        chunks.tobytes() if wide else chunks.astype(CHUNK_DTYPE, copy=False).tobytes(),
        keys,
        metadata,
    ]
    return b"".join(parts)


def decode_index(buf) -> RawIndex:
    """Split an index into its sections; every length is checked against the
    buffer before anything is allocated from it."""
    need(buf, INDEX_HEADER.size, "index header")
    (
        entry_size,
        chunk_record_size,
        n_tensors,
        n_dims,
        n_chunks,
        keys_nbytes,
        metadata_nbytes,
        alignment,
        reserved1,
        reserved2,
    ) = INDEX_HEADER.unpack_from(buf, 0)
    if reserved1 or reserved2:
        raise FormatError("reserved index header field is not zero")
    # Later minor versions may append fields to records; readers skip them.
    if entry_size < ENTRY_DTYPE.itemsize or entry_size % 8:
        raise FormatError(f"invalid index entry size {entry_size}")
    if chunk_record_size < CHUNK_DTYPE.itemsize or chunk_record_size % 8:
        raise FormatError(f"invalid chunk record size {chunk_record_size}")
    if alignment < 8 or alignment > (1 << 30) or alignment & (alignment - 1):
        raise FormatError(f"alignment {alignment} is not a power of two between 8 and 2**30")
    # Python ints cannot overflow, so absurd counts simply fail this sum.
    sizes = (
        n_tensors * entry_size,
        n_dims * DIM_DTYPE.itemsize,
        n_chunks * chunk_record_size,
        keys_nbytes,
        metadata_nbytes,
    )
    expected = INDEX_HEADER.size + sum(sizes)
    if expected != len(buf):
        raise FormatError(
            f"index sections add up to {expected} bytes but the index is {len(buf)} bytes"
        )
    pos = INDEX_HEADER.size
    sections = []
    for size in sizes:
        sections.append(memoryview(buf)[pos : pos + size])
        pos += size
    entries = _records(sections[0], n_tensors, entry_size, ENTRY_DTYPE)
    dims = np.frombuffer(sections[1], dtype=DIM_DTYPE)
    chunks = _records(sections[2], n_chunks, chunk_record_size, CHUNK_DTYPE)
    base_checksums = None
    if chunk_record_size >= WIDE_CHUNK_DTYPE.itemsize:
        wide = _records(sections[2], n_chunks, chunk_record_size, WIDE_CHUNK_DTYPE)
        base_checksums = np.ascontiguousarray(wide["base_checksum"])
    digests = base_digests = None
    if chunk_record_size >= DIGEST_CHUNK_DTYPE.itemsize:
        widest = DELTA_DIGEST_CHUNK_DTYPE if chunk_record_size >= DELTA_DIGEST_CHUNK_DTYPE.itemsize \
            else DIGEST_CHUNK_DTYPE
        records = _records(sections[2], n_chunks, chunk_record_size, widest)
        digests = np.ascontiguousarray(records["digest"])
        if widest is DELTA_DIGEST_CHUNK_DTYPE:
            base_digests = np.ascontiguousarray(records["base_digest"])
    return RawIndex(entries, dims, chunks, bytes(sections[3]), bytes(sections[4]), alignment, base_checksums,
                    digests, base_digests)


def _records(section, count: int, record_size: int, dtype: np.dtype) -> np.ndarray:
    """View ``count`` records of ``record_size`` bytes, keeping the known prefix."""
    if record_size == dtype.itemsize:
        return np.frombuffer(section, dtype=dtype, count=count)
    names, fields = dtype.names, dtype.fields
    # Every caller passes one of the structured record dtypes above.
    assert names is not None and fields is not None
    padded = np.dtype({"names": names, "formats": [fields[n][0] for n in names],
                       "offsets": [fields[n][1] for n in names], "itemsize": record_size})
    return np.frombuffer(section, dtype=padded, count=count).astype(dtype)
