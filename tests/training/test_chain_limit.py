"""CheckpointManager's delta_depth is bounded by the chain a reader follows."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore._native.base_ref import MAX_CHAIN


@pytest.mark.parametrize("depth", [MAX_CHAIN + 1, 100, None])
def test_a_delta_depth_the_reader_could_not_follow_is_refused_at_once(tmp_path, depth):
    with pytest.raises(ls.InvalidInputError, match=f"delta_depth must be an int from 1 to {MAX_CHAIN}"):
        ls.CheckpointManager(tmp_path / "run", delta=True, delta_depth=depth)
    assert not (tmp_path / "run").exists()  # refused before anything is made


def test_the_deepest_delta_depth_restores_every_step(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", delta_depth=MAX_CHAIN,
                               keyframe_every=1000)
    w = np.linspace(0, 1, 512, dtype=np.float32)
    for step in range(1, 4):
        mgr.save(step, {"w": w + np.float32(step) * 1e-4})
    for step in range(1, 4):
        assert mgr.restore(step)["w"].tobytes() == (w + np.float32(step) * 1e-4).tobytes()
