"""Blocks that cover a tensor in order, each bounded in size and contiguous."""

from __future__ import annotations

import numpy as np
import pytest

from lazystore._core.blocks import blocks


@pytest.mark.parametrize("shape", [(), (0, 3), (10,), (7, 5), (3, 4, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("limit", [1, 8, 24, 100, 10**6])
def test_blocks_cover_each_element_once(shape, limit):
    seen = np.zeros(shape, np.int64)
    for idx in blocks(shape, 4, limit):
        seen[idx] += 1
        assert seen[idx].size * 4 <= max(limit, 4)  # bounded memory
        assert seen[idx].flags.c_contiguous  # a run of the file: whole chunks, no strided reads
    assert (seen == 1).all()
