"""Canonical, length-limited Huffman codes for codec 4's planes: the table
side shared by the encoder and both decoders.

A Huffman plane (docs/format.md §9.5) is a small header
and code table followed by ``S`` streams that code consecutive runs of the
plane's symbols. This module computes the code lengths (package-merge;
the canonical codes are huffman_canonical's), writes and parses the header
and table with every refusal §3 lists, and dispatches the streams to the C
kernels where they are built, else to the numpy reference
(:mod:`huffman_ref`). The two refusals about a stream's own bits (it ends
early, it ends late) are the decoders', since only decoding finds them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from lazystore._core.short_reads import need
from lazystore.codecs import compiled, huffman_ref
from lazystore.codecs.float_layout import LAYOUT_PLAIN
from lazystore.codecs.huffman_canonical import MAX_LENGTH
from lazystore.errors import FormatError

# The writer limits codes to 11 bits (design §1.3: within 0.1% of 12 bits'
# ratio, and the kernel's 2^11-entry table stays in L1); the format allows 12.
WRITE_LIMIT = 11
# The format allows 1..8 interleaved streams; the writer uses 4, which the
# kernel decodes in lockstep.
MAX_STREAMS = 8
WRITE_STREAMS = 4

_U32 = struct.Struct("<I")


class HuffmanPlane(NamedTuple):
    """A parsed Huffman plane: its code table and its streams.

    The field order is the tuple the C kernel's ``float_decode`` takes.

    Attributes
    ----------
    symbols : bytes
        The ``k`` symbols with a code, strictly ascending.
    lengths : bytes
        Their code lengths, one per byte, in symbol order.
    lmax : int
        The longest code length.
    streams : tuple of memoryview
        The ``S`` streams' bytes, in order.
    """

    symbols: bytes
    lengths: bytes
    lmax: int
    streams: tuple[memoryview, ...]


def code_lengths(counts: np.ndarray, limit: int = WRITE_LIMIT) -> np.ndarray:
    """Optimal code lengths no longer than ``limit``, by package-merge.

    Parameters
    ----------
    counts : numpy.ndarray
        256 symbol counts; at least two must be non-zero.
    limit : int, optional
        The longest code length allowed, 1 to ``MAX_LENGTH``.

    Returns
    -------
    numpy.ndarray
        256 uint8 lengths, 0 for an absent symbol. They satisfy Kraft's
        equality and minimise the coded size among all lengths within
        ``limit``.

    Raises
    ------
    ValueError
        Fewer than two symbols are present, or more than ``2**limit``.
    """
    counts = np.asarray(counts, dtype=np.int64)
    present = np.flatnonzero(counts)
    k = len(present)
    if counts.shape != (256,) or k < 2 or not 1 <= limit <= MAX_LENGTH or k > 1 << limit:
        raise ValueError(f"no code of length <= {limit} for {k} symbols in counts of shape {counts.shape}")
    # Leaves by weight, then symbol: ties are broken the same way every time.
    order = present[np.argsort(counts[present], kind="stable")]
    leaves = counts[order]
    # Package-merge keeps one list per length, deepest first: there only the
    # leaves, then at each shallower length the leaves merged with the pairs
    # ("packages") of the deeper list. The code is the first 2k-2 items of
    # the shallowest list. What is chosen of any list is a prefix of it, and
    # its leaves come in weight order, so the chosen leaves are the lightest
    # ones: only which items are leaves needs keeping, not what each package
    # holds.
    leaf_flags = [np.ones(k, dtype=bool)]
    items = leaves
    for _ in range(limit - 1):
        pairs = len(items) // 2 * 2
        merged = np.concatenate([leaves, items[0:pairs:2] + items[1:pairs:2]])
        by_weight = np.argsort(merged, kind="stable")  # a leaf first on a tie
        items = merged[by_weight]
        leaf_flags.append(by_weight < k)
    # Walk back from the shallowest list: the chosen leaves are the lightest
    # ``chosen`` leaves, each one bit longer for every list that chose it,
    # and each chosen package chooses two items of the list below.
    lengths = np.zeros(k, dtype=np.uint8)
    take = 2 * k - 2
    for flags in reversed(leaf_flags):
        chosen = int(np.count_nonzero(flags[:take]))
        lengths[:chosen] += 1
        take = 2 * (take - chosen)
    out = np.zeros(256, dtype=np.uint8)
    out[order] = lengths
    return out


def stream_count(n: int, wanted: int = WRITE_STREAMS) -> int:
    """The most streams, up to ``wanted``, that leave none of ``n`` symbols' streams empty.

    Parameters
    ----------
    n : int
        The plane's symbol count, at least 1.
    wanted : int, optional
        The stream count hoped for, 1 to ``MAX_STREAMS``.

    Returns
    -------
    int
        The largest ``S <= wanted`` with ``(S - 1) * ceil(n / S) < n``.

    Raises
    ------
    ValueError
        ``n`` is below 1 or ``wanted`` outside 1 to ``MAX_STREAMS``.
    """
    if n < 1 or not 1 <= wanted <= MAX_STREAMS:
        raise ValueError(f"no stream count for {n} symbols and {wanted} streams wanted")
    s = wanted
    while (s - 1) * -(-n // s) >= n:  # ends at 1 at the latest
        s -= 1
    return s


def plane_header(lengths256: np.ndarray, nstreams: int) -> bytes:
    """A Huffman plane's bytes before its stream lengths: S, Lmax, k-1, symbols, length nibbles.

    Parameters
    ----------
    lengths256 : numpy.ndarray
        256 code lengths (0 for an absent symbol), as :func:`code_lengths`
        gives: at least two present.
    nstreams : int
        The stream count S.

    Returns
    -------
    bytes
        Bytes ``0 .. T-1`` of the plane (format §9.5).
    """
    lengths = np.asarray(lengths256, dtype=np.uint8)
    symbols = np.flatnonzero(lengths).astype(np.uint8)
    nibbles = lengths[symbols]
    if len(nibbles) % 2:
        nibbles = np.append(nibbles, np.uint8(0))  # the pad nibble
    packed = nibbles[0::2] | (nibbles[1::2] << 4)  # low nibble first
    return bytes([nstreams, int(lengths.max()), len(symbols) - 1]) + symbols.tobytes() + packed.tobytes()


def _lengths(blob: memoryview, k: int, lmax: int) -> np.ndarray:
    """The table's k code lengths, after checking every rule on them."""
    packed = np.frombuffer(blob, dtype=np.uint8, count=(k + 1) // 2, offset=3 + k)
    nibbles = np.empty(2 * len(packed), dtype=np.uint8)
    nibbles[0::2] = packed & 0x0F
    nibbles[1::2] = packed >> 4
    if k % 2 and nibbles[k]:
        raise FormatError(f"Huffman plane: pad nibble after {k} code lengths is {nibbles[k]}, must be 0")
    lengths = nibbles[:k]
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest == 0 or longest > lmax:
        raise FormatError(f"Huffman plane: code lengths {shortest}..{longest}, each must be 1..Lmax={lmax}")
    kraft = int(np.sum(np.int64(1) << (lmax - lengths.astype(np.int64))))
    if kraft != 1 << lmax:
        state = "over-subscribed" if kraft > 1 << lmax else "incomplete"
        raise FormatError(f"Huffman plane: the code is {state} (Kraft sum {kraft}/{1 << lmax}, must be equal)")
    if longest != lmax:
        raise FormatError(f"Huffman plane: no code has length Lmax={lmax} (longest is {longest})")
    return lengths


def parse_plane(blob: memoryview, n: int) -> HuffmanPlane:
    """The code table and streams of a Huffman plane of ``n`` symbols, checked.

    Parameters
    ----------
    blob : memoryview
        The whole Huffman plane (any bytes-like object).
    n : int
        The plane's symbol count (its ``plane_len``).

    Returns
    -------
    HuffmanPlane
        The table and the streams, which are views of ``blob``.

    Raises
    ------
    FormatError
        The header, the table or the stream lengths break format §9.5 (a
        stream's own bits are checked by the decoders).
    """
    blob = memoryview(blob).cast("B")
    need(blob, 3, "Huffman plane header")
    s, lmax, k = blob[0], blob[1], blob[2] + 1
    if not 1 <= s <= MAX_STREAMS:
        raise FormatError(f"Huffman plane: {s} streams, must be 1..{MAX_STREAMS}")
    if not 1 <= lmax <= MAX_LENGTH:
        raise FormatError(f"Huffman plane: Lmax {lmax}, must be 1..{MAX_LENGTH}")
    if k < 2:
        raise FormatError(f"Huffman plane: {k} symbol with a code, must be at least 2")
    table_end = 3 + k + (k + 1) // 2
    body = table_end + 4 * (s - 1)
    need(blob, body, f"Huffman plane table of {k} symbols and {s} streams")
    symbols = bytes(blob[3 : 3 + k])
    if any(a >= b for a, b in zip(symbols, symbols[1:])):
        raise FormatError("Huffman plane: the symbols are not strictly ascending")
    lengths = _lengths(blob, k, lmax)
    per_stream = -(-n // s)
    if (s - 1) * per_stream >= n:
        raise FormatError(f"Huffman plane: {s} streams of {per_stream} symbols leave one empty for {n} symbols")
    slens = [_U32.unpack_from(blob, table_end + 4 * i)[0] for i in range(s - 1)]
    if sum(slens) > len(blob) - body:
        raise FormatError(f"Huffman plane: stream lengths {slens} overrun the {len(blob) - body} bytes of streams")
    bounds = np.cumsum([body, *slens, len(blob) - body - sum(slens)]).tolist()
    streams = tuple(blob[a:b] for a, b in zip(bounds, bounds[1:]))
    return HuffmanPlane(symbols, lengths.tobytes(), lmax, streams)


def encode_plane(plane: np.ndarray, limit: int = WRITE_LIMIT, streams: int = WRITE_STREAMS) -> bytes | None:
    """A plane of symbols as a Huffman plane, or None for fewer than two distinct symbols.

    Parameters
    ----------
    plane : numpy.ndarray
        The symbols: a 1-D uint8 array, not empty.
    limit : int, optional
        The longest code length to use.
    streams : int, optional
        The stream count wanted (fewer where the plane is too short).

    Returns
    -------
    bytes or None
        The whole Huffman plane (format §9.5); None where fewer than two
        distinct symbols leave nothing to code (the writer stores such a
        plane another way).
    """
    plane = np.ascontiguousarray(plane, dtype=np.uint8).reshape(-1)
    kernels = compiled.kernels
    if kernels is not None:  # np.bincount widens each byte to an intp first: 4x slower
        counts = np.empty(256, dtype="<u8")
        kernels.byte_counts(plane, counts)
    else:
        counts = np.bincount(plane, minlength=256)
    if np.count_nonzero(counts) < 2:
        return None
    lengths = code_lengths(counts, limit)
    nstreams = stream_count(len(plane), streams)
    if kernels is not None:
        coded = kernels.huffman_encode(plane, lengths.tobytes(), nstreams)
    else:
        coded = huffman_ref.encode_streams(plane, lengths, nstreams)
    return plane_header(lengths, nstreams) + coded


def decode_plane(blob: memoryview, n: int) -> np.ndarray:
    """The ``n`` symbols of a Huffman plane, in a new array.

    Parameters
    ----------
    blob : memoryview
        The whole Huffman plane (any bytes-like object).
    n : int
        The plane's symbol count.

    Returns
    -------
    numpy.ndarray
        ``n`` uint8 symbols.

    Raises
    ------
    FormatError
        The plane breaks format §9.5: a bad header or table, or a stream that
        ends before its symbols or runs on after them.
    """
    parsed = parse_plane(blob, n)
    kernels = compiled.kernels
    if kernels is None:
        return huffman_ref.decode_streams(parsed, n)
    out = np.empty(n, dtype=np.uint8)
    try:
        # A lone plane is its own element: the plain layout of one plane decodes it.
        kernels.float_decode(out, LAYOUT_PLAIN, [parsed])
    except ValueError as exc:  # the kernel's refusals are the bytes' fault
        raise FormatError(f"Huffman plane: {exc}") from exc
    return out
