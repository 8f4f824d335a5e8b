"""The numpy reference coder of Huffman planes' streams (docs/format.md §9.5; design 29 §4).

It gives the same bytes as the C kernels, slower; it is what runs where
they are not built, and what the tests compare them with. There is no
Python loop per symbol or per bit.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np

from lazystore._core.scratch import scratch
from lazystore.codecs.huffman_canonical import canonical_codes, reverse_bits
from lazystore.errors import FormatError

if TYPE_CHECKING:  # huffman_code imports this module to call it
    from lazystore.codecs.huffman_code import HuffmanPlane


def encode_streams(plane: np.ndarray, lengths256: np.ndarray, nstreams: int) -> bytes:
    """The stream part of a Huffman plane: S-1 stream lengths, then the streams.

    Parameters
    ----------
    plane : numpy.ndarray
        The symbols, 1-D uint8; each must have a non-zero length.
    lengths256 : numpy.ndarray
        256 code lengths, as :func:`huffman_code.code_lengths` gives.
    nstreams : int
        The stream count S, as :func:`huffman_code.stream_count` gives for
        the plane's length.

    Returns
    -------
    bytes
        Bytes ``T ..`` of the Huffman plane (format §9.5).
    """
    lengths = np.asarray(lengths256, dtype=np.uint8)
    # Bits go LSB-first into the stream but each code MSB-first (deflate), so
    # a code is written as its bit-reversal, least significant bit first.
    reversed_codes = reverse_bits(canonical_codes(lengths), lengths).astype(np.uint64)
    plane = np.asarray(plane, dtype=np.uint8).reshape(-1)
    per_stream = -(-len(plane) // nstreams)
    coded = [_pack(plane[s * per_stream : (s + 1) * per_stream], reversed_codes, lengths)
             for s in range(nstreams)]
    return struct.pack(f"<{nstreams - 1}I", *map(len, coded[:-1])) + b"".join(coded)


# Symbols packed per numpy pass: the temporaries (a few 8-byte arrays per
# symbol) stay in cache and the allocator reuses them, instead of each pass
# faulting in fresh pages for the whole stream.
PACK_BLOCK = 1 << 16


def _pack(symbols: np.ndarray, reversed_codes: np.ndarray, lengths: np.ndarray) -> bytes:
    """One stream: the symbols' codes back to back, LSB-first, zero-padded to a byte."""
    widths_of = lengths.astype(np.int64)
    # A code is at most 12 bits: this bounds the stream's 64-bit words.
    words = np.zeros(len(symbols) * int(widths_of.max()) // 64 + 2, dtype=np.uint64)
    nbits = 0
    for lo in range(0, len(symbols), PACK_BLOCK):
        block = symbols[lo : lo + PACK_BLOCK]
        widths = widths_of.take(block)
        ends = np.cumsum(widths)
        ends += nbits
        starts = ends - widths
        nbits = int(ends[-1])
        # A code starts in one word and may spill into the next. Codes never
        # overlap, so OR-reducing the codes that start in a word assembles it
        # (and the word before's spill); every word up to the last holds
        # some code's start.
        word = starts >> 6
        shift = (starts & 63).astype(np.uint64)
        values = reversed_codes.take(block)
        first = np.flatnonzero(np.concatenate([[True], word[1:] != word[:-1]]))  # bool: numpy's fast nonzero
        words[word[first]] |= np.bitwise_or.reduceat(values << shift, first)
        spill = (values >> np.uint64(1)) >> (np.uint64(63) - shift)  # values >> (64 - shift), 0 for shift 0
        words[word[first] + 1] |= np.bitwise_or.reduceat(spill, first)
    return words.astype("<u8").view(np.uint8)[: (nbits + 7) // 8].tobytes()


def decode_table(parsed: HuffmanPlane) -> tuple[np.ndarray, np.ndarray]:
    """The decoder's tables, indexed by the next Lmax stream bits (LSB-first).

    Parameters
    ----------
    parsed : HuffmanPlane
        A plane's code, as :func:`huffman_code.parse_plane` checked it.

    Returns
    -------
    tuple of numpy.ndarray
        ``2**Lmax`` uint8 symbols and ``2**Lmax`` uint8 code lengths: the
        code that the window's low bits start with.
    """
    symbols = np.frombuffer(parsed.symbols, dtype=np.uint8)
    lengths = np.frombuffer(parsed.lengths, dtype=np.uint8).astype(np.int64)
    by_code = np.lexsort((symbols, lengths))
    # In MSB-first order the canonical codes tile the 2^Lmax windows in
    # (length, symbol) order, each over 2^(Lmax - length) of them (Kraft's
    # equality: exactly all); the LSB-first index is that bit-reversed.
    span = np.int64(1) << (parsed.lmax - lengths[by_code])
    window = reverse_bits(np.arange(1 << parsed.lmax), parsed.lmax)
    table_symbols = np.empty(1 << parsed.lmax, dtype=np.uint8)
    table_lengths = np.empty(1 << parsed.lmax, dtype=np.uint8)
    table_symbols[window] = np.repeat(symbols[by_code], span)
    table_lengths[window] = np.repeat(lengths[by_code].astype(np.uint8), span)
    return table_symbols, table_lengths


def decode_streams(parsed: HuffmanPlane, n: int) -> np.ndarray:
    """Decode every stream of a parsed Huffman plane.

    Parameters
    ----------
    parsed : HuffmanPlane
        The plane, as :func:`huffman_code.parse_plane` checked it for ``n``
        symbols.
    n : int
        How many symbols the streams code, together.

    Returns
    -------
    numpy.ndarray
        The symbols, uint8, stream 0's first.

    Raises
    ------
    FormatError
        A stream's bits run out before its last symbol, or go on after it
        (a whole byte left over, or pad bits that are not zero).
    """
    table = decode_table(parsed)
    per_stream = -(-n // len(parsed.streams))
    out = np.empty(n, dtype=np.uint8)
    for s, stream in enumerate(parsed.streams):
        lo, hi = s * per_stream, min((s + 1) * per_stream, n)
        out[lo:hi] = _decode_stream(stream, hi - lo, table, parsed.lmax, f"stream {s}")
    return out


# Bits per segment (see _decode_stream): one uint64 holds a segment's code
# starts (32 bits) and its exit state (4 bits). 32 measured fastest of 16,
# 32 and 64 on a 1 MiB exponent plane.
SEGMENT_BITS = 32


def _decode_stream(stream: memoryview, count: int, table: tuple[np.ndarray, np.ndarray], lmax: int,
                   name: str) -> np.ndarray:
    """One stream's ``count`` symbols, or FormatError if it ends early or late.

    A prefix code is decoded one code after another, which numpy cannot do.
    So every bit position is treated as a possible code start. The stream
    is cut into segments of ``SEGMENT_BITS`` bits; the first code start at
    or after a segment's beginning lies less than Lmax bits into it (the
    segment's *entry*). Within each segment, for every offset, a recurrence
    from the last offset down (one numpy pass per offset, over all
    segments) gives the code starts that decoding from there meets in the
    segment, and where it leaves it (the entry of the next). Composing those
    exits over the segments (a tree of gathers) gives every segment's true
    entry, hence every code start of the stream.
    """
    table_symbols, table_lengths = table
    width = SEGMENT_BITS
    nbits = 8 * len(stream)
    # Zero bits pad the stream so that the windows past its end, and the
    # code after its last symbol, are defined (and bounded: all-zero bits
    # are a code, the shortest one).
    nseg = -(-(nbits + lmax) // width)
    nbytes = nseg * width // 8
    padded = np.zeros(nbytes + 2, dtype=np.intp)
    padded[: len(stream)] = np.frombuffer(stream, dtype=np.uint8)
    # The next Lmax (<= 12) bits at bit b of byte j are in bytes j..j+2. The
    # big arrays are this thread's scratch, reused: fresh ones would fault
    # in their pages on every chunk (half the decode time, measured).
    three = padded[:-2] | (padded[1:-1] << 8) | (padded[2:] << 16)
    windows = _scratch("huffman windows", (nbytes, 8), np.intp)
    np.right_shift(three[:, None], np.arange(8), out=windows)
    windows &= (1 << lmax) - 1
    windows = windows.reshape(-1)
    lengths = table_lengths.take(windows, out=_scratch("huffman lengths", (nseg, width), np.uint8).reshape(-1))
    # state[o] for offset o < width: bits 0..width-1 the code starts met from
    # o on within the segment, bits width.. the exit (bits past the segment's
    # end where decoding leaves it). Rows width.. are the offsets past it.
    state = _scratch("huffman state", (width + lmax, nseg), np.uint64)
    state[width:] = (np.arange(lmax, dtype=np.uint64) << np.uint64(width))[:, None]
    # after[o]: the flat index of state[o + the length of the code at o].
    after = _scratch("huffman after", (width, nseg), np.intp)
    np.add(lengths.reshape(nseg, width).T, np.arange(width)[:, None], out=after)
    after *= nseg
    after += np.arange(nseg)
    flat = state.reshape(-1)
    for o in range(width - 1, -1, -1):
        np.take(flat, after[o], out=state[o])
        state[o] |= np.uint64(1 << o)
    entries = _entries((state[:lmax] >> np.uint64(width)).astype(np.uint8).T)[:nseg]
    # (bytes 0..3 of a little-endian word: the numpy paths refuse big-endian hosts, as today)
    starts_bits = state[entries, np.arange(nseg)].view(np.uint8).reshape(nseg, 8)[:, : width // 8]
    # (as bool: numpy's nonzero is several times faster on bool than on uint8)
    starts = np.flatnonzero(np.unpackbits(starts_bits, axis=1, bitorder="little").view(bool))
    # The code after the last symbol starts where the stream's bits must end.
    if np.searchsorted(starts, nbits) < count or starts[count] > nbits:
        raise FormatError(f"Huffman plane: {name} ends before its {count} symbols")
    end = int(starts[count])
    if end <= nbits - 8 or (end < nbits and stream[-1] >> (end + 8 - nbits)):
        raise FormatError(f"Huffman plane: {name} runs on after its {count} symbols "
                          f"(its codes end at bit {end} of {nbits}, the rest must be under 8 zero bits)")
    return table_symbols.take(windows[starts[:count]])


def _scratch(purpose: str, shape: tuple[int, int], dtype: type) -> np.ndarray:
    """This thread's scratch buffer for ``purpose`` as an array (garbage contents)."""
    size = shape[0] * shape[1] * np.dtype(dtype).itemsize
    return scratch(purpose, size).view(dtype).reshape(shape)


def _entries(exits: np.ndarray) -> np.ndarray:
    """Each segment's entry, from its exit for every entry (``exits[g, e]``); segment 0's entry is 0.

    Up the tree, neighbours' exit maps compose pairwise (an odd one out is
    paired with the identity); down it, a left child's entry is its
    parent's and a right child's is where the left child leaves.
    """
    identity = np.arange(exits.shape[1], dtype=np.uint8)[None]
    levels = []
    while len(exits) > 1:
        if len(exits) % 2:
            exits = np.concatenate([exits, identity])
        levels.append(exits)
        exits = np.take_along_axis(exits[1::2], exits[0::2].astype(np.intp), axis=1)
    entries = np.zeros(1, dtype=np.uint8)
    for level in reversed(levels):
        parents = entries[: len(level) // 2]
        entries = np.empty(len(level), dtype=np.uint8)
        entries[0::2] = parents
        entries[1::2] = level[0::2][np.arange(len(parents)), parents]
    return entries
