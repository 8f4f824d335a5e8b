"""Cutting a stream of byte pieces into pieces of given sizes.

A tensor larger than memory reaches the writer as pieces of whatever size
its reader produces (rows of a file, blocks of a decode); the writer needs
it as chunks of the sizes its chunk grid says. :func:`rechunk` joins and
cuts without holding more than one chunk beyond the pieces themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from lazystore.errors import InvalidInputError


def as_bytes(piece) -> np.ndarray:
    """A piece (an array of any dtype, or any bytes-like object) as a 1-D
    uint8 array of its bytes in C order; no copy when it is contiguous."""
    arr = np.asarray(piece)
    if arr.dtype.hasobject:
        raise InvalidInputError(f"a tensor piece must hold numbers or bytes, got {arr.dtype}")
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def rechunk(pieces: Iterable, sizes: Sequence[int]) -> Iterator[np.ndarray]:
    """Yield one uint8 array per size in ``sizes``, made of the concatenated
    bytes of ``pieces``: a view into a piece when one piece holds the whole
    chunk, else a new array joining several. The pieces must hold exactly
    ``sum(sizes)`` bytes (InvalidInputError otherwise), and must not change
    while the chunks cut from them are in use."""
    total = sum(sizes)
    stream = (as_bytes(p) for p in pieces)
    current = np.empty(0, np.uint8)
    pos = 0  # bytes of ``current`` already used
    seen = 0  # bytes of all pieces so far

    def next_piece() -> np.ndarray:
        nonlocal seen
        piece = next(stream, None)
        if piece is None:
            raise InvalidInputError(f"the pieces hold {seen} bytes; dtype x shape needs {total}")
        seen += len(piece)
        return piece

    for n in sizes:
        while n and pos == len(current):
            # The piece is used up: a chunk that the next piece holds whole
            # is a view of it, not a copy (a writer's first chunk of each
            # window of a large tensor).
            current, pos = next_piece(), 0
        if len(current) - pos >= n:
            yield current[pos : pos + n]
            pos += n
            continue
        out = np.empty(n, np.uint8)
        filled = len(current) - pos
        out[:filled] = current[pos:]
        while filled < n:
            current = next_piece()
            pos = min(n - filled, len(current))
            out[filled : filled + pos] = current[:pos]
            filled += pos
        yield out
    for piece in stream:
        seen += len(piece)
    if seen != total:  # more bytes than the tensor holds
        raise InvalidInputError(f"the pieces hold {seen} bytes; dtype x shape needs {total}")
