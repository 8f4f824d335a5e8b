"""Finding and reading a lazystore file's index from a byte source.

The trailer at the end of the file says where the index is; the first read
takes the file's tail, which usually holds the index too, so opening a file
costs one read (two when the index is larger than the tail read). The index
bytes are checked against the trailer's checksum before they are parsed.
"""

from __future__ import annotations

from lazystore._core.checksum import check
from lazystore._native import layout as fmt
from lazystore._native.index import Index
from lazystore.errors import FormatError


def read_tail(source) -> tuple[int, memoryview]:
    """``(start, bytes)`` of the first read of :func:`read_index`: the whole
    of a mapped file (free), else the last TAIL_READ_BYTES of the source."""
    size = source.size
    tail_start = 0 if source.mapped() is not None else max(0, size - fmt.TAIL_READ_BYTES)
    return tail_start, source.read(tail_start, size)


def read_index(source, known_tail: tuple[int, memoryview] | None = None, *,
               index_check=None) -> tuple[Index, tuple[int, int]]:
    """Find, check and parse a source's index with at most two reads.

    The first read takes the file's tail, which holds the trailer and, for
    all but huge indexes, the index too; a second read fetches a larger
    index. The preamble is checked too when it is already at hand (a mapped
    file, or a file small enough to be in the tail); otherwise ``verify()``
    checks it. ``known_tail`` is :func:`read_tail`'s result when the caller has
    already read it (to tell the format apart), saving the read.
    """
    size = source.size
    smallest = fmt.PREAMBLE.size + fmt.TRAILER.size
    if size < smallest:
        raise FormatError(f"not a lazystore file: {size} bytes is shorter than the smallest possible file "
                          f"({smallest} bytes)")
    tail_start, tail = known_tail if known_tail is not None else read_tail(source)
    # A wrong magic is best reported from the start.
    head_version = fmt.decode_preamble(tail) if tail_start == 0 else None
    trailer = fmt.decode_trailer(tail, size)
    if trailer.index_offset >= tail_start:
        lo = trailer.index_offset - tail_start
        buf = tail[lo : lo + trailer.index_length]
    else:
        buf = source.read(trailer.index_offset, trailer.index_offset + trailer.index_length)
    if index_check is not None:
        index_check(size, trailer, buf)
    check(buf, trailer.index_checksum, "index")
    index = Index.parse(buf, trailer.index_offset, trailer.minor)
    # What a delta file records of its base (docs/format.md §9.3).
    index.identity = (trailer.index_checksum, trailer.index_length)
    version = (trailer.major, trailer.minor)
    if head_version is not None:
        fmt.check_preamble(tail, index.data_start, version, head_version)
    return index, version
