"""rechunk: pieces of any size cut into chunks of given sizes, copying only
the chunks that straddle two pieces."""

from __future__ import annotations

import numpy as np
import pytest

from lazystore._core.rechunk import rechunk
from lazystore.errors import InvalidInputError

DATA = np.arange(256, dtype=np.uint8) * 7


def cut(cuts: list[int]) -> list[np.ndarray]:
    edges = [0, *cuts, len(DATA)]
    return [DATA[a:b] for a, b in zip(edges, edges[1:])]


@pytest.mark.parametrize("pieces", [[], [64], [64, 128], [1, 2, 3, 100], [64, 64, 65]], ids=str)
@pytest.mark.parametrize("sizes", [[256], [64] * 4, [100, 100, 56], [1] * 256, [0, 128, 0, 128]], ids=len)
def test_chunks_hold_the_pieces_bytes_in_order(pieces, sizes):
    chunks = list(rechunk(cut(pieces), sizes))
    assert [len(c) for c in chunks] == sizes
    np.testing.assert_array_equal(np.concatenate(chunks), DATA)


def test_a_chunk_inside_one_piece_is_a_view_of_it():
    # Pieces of 64 bytes cut into chunks of 32: every chunk lies inside one
    # piece, the first of each piece too, so nothing is copied.
    pieces = cut([64, 128, 192])
    chunks = list(rechunk(pieces, [32] * 8))
    assert all(np.shares_memory(chunk, pieces[i // 2]) for i, chunk in enumerate(chunks))


def test_a_chunk_across_pieces_is_joined():
    pieces = cut([100])
    first, second = rechunk(pieces, [128, 128])
    assert not np.shares_memory(first, DATA)  # bytes 0-127 span both pieces
    assert np.shares_memory(second, pieces[1])
    np.testing.assert_array_equal(first, DATA[:128])


@pytest.mark.parametrize("pieces", [[DATA[:100]], [DATA, DATA[:1]]], ids=["fewer", "more"])
def test_pieces_of_the_wrong_total_are_refused(pieces):
    with pytest.raises(InvalidInputError, match="the pieces hold"):
        list(rechunk(pieces, [128, 128]))
