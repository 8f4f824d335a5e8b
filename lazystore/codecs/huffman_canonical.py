"""Deflate's canonical Huffman codes as integers, for codec 4's numpy
coder (lazystore/codecs/huffman_ref.py) and its tests.

Apart from lazystore/codecs/huffman_code.py, which parses and writes the
table and calls the numpy coder: the numpy coder needs these, and an import
back into huffman_code would be a cycle.
"""

from __future__ import annotations

import numpy as np

# The format's longest code (format §9.5); the writer's limit is huffman_code's.
MAX_LENGTH = 12


def canonical_codes(lengths256: np.ndarray) -> np.ndarray:
    """Deflate's canonical codes for the given code lengths.

    Parameters
    ----------
    lengths256 : numpy.ndarray
        256 code lengths, 0 for an absent symbol.

    Returns
    -------
    numpy.ndarray
        256 uint32 codes (most significant bit first, ``lengths256[s]``
        bits each); 0 for an absent symbol.
    """
    lengths = np.asarray(lengths256, dtype=np.int64)
    present = np.flatnonzero(lengths)
    by_code = present[np.lexsort((present, lengths[present]))]  # by (length, symbol)
    top = int(lengths.max())
    # Canonical codes are consecutive integers in (length, symbol) order,
    # shifted left when the length grows: aligned to ``top`` bits, each is
    # the Kraft sum of the codes before it.
    span = np.int64(1) << (top - lengths[by_code])
    aligned = np.cumsum(span) - span
    codes = np.zeros(256, dtype=np.uint32)
    codes[by_code] = aligned >> (top - lengths[by_code])
    return codes


def reverse_bits(values: np.ndarray, widths: np.ndarray | int) -> np.ndarray:
    """Each value's low ``widths`` bits in reverse order.

    Parameters
    ----------
    values : numpy.ndarray
        Non-negative integers below ``2**widths``.
    widths : numpy.ndarray or int
        Bit widths, up to ``MAX_LENGTH``, one per value or one for all.

    Returns
    -------
    numpy.ndarray
        The reversed values, as int64.
    """
    values = np.asarray(values, dtype=np.int64)
    widths = np.asarray(widths, dtype=np.int64)
    out = np.zeros(values.shape, dtype=np.int64)
    for bit in range(MAX_LENGTH):
        # bit ``bit`` moves to ``width - 1 - bit``; past the width it is 0.
        moved = (values >> bit) & 1
        out |= np.where(bit < widths, moved << np.maximum(widths - 1 - bit, 0), 0)
    return out
