"""CheckpointManager(delta=True) with deltas of deltas (older ones against
newer ones): restores at every depth, the chain checked, and retention
over many deletion patterns."""

from __future__ import annotations

import random

import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.strategies import same_tree
from tests.training.test_manager_delta import base_names, check_folder, depth, moving, state


def save_series(tmp_path, steps, state=state, **kwargs):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", **kwargs)
    for step in steps:
        mgr.save(step, state(step))
    return mgr


@pytest.mark.slow
@pytest.mark.parametrize("bound", [2, 3])
def test_every_depth_restores_bit_identical_and_opens_alone(tmp_path, bound):
    mgr = save_series(tmp_path, range(1, 11), moving, keyframe_every=100, delta_depth=bound)
    depths = {s: depth(mgr, s) for s in mgr.steps()}
    assert max(depths.values()) == bound, base_names(mgr)  # the bound is reached, never passed
    check_folder(mgr, moving)
    for step in mgr.steps():
        path = mgr.path(step)
        same_tree(moving(step), ls.load(path))  # without the manager: the chain is found beside it
        with ls.open(path) as ck:
            assert ck.verify() == []
            np.testing.assert_array_equal(ck["model/w"][3:5], moving(step)["model"]["w"][3:5])


@pytest.mark.slow
def test_keep_last_8_keeps_the_oldest_at_most_delta_depth_deep_and_the_latest_whole(tmp_path):
    mgr = save_series(tmp_path, range(1, 20), moving, keep_last=8)
    assert len(mgr.steps()) == 8
    names = {mgr.path(s).name: s for s in mgr.steps()}
    for step, base in base_names(mgr).items():
        assert base is None or names[base] > step  # bases are newer
    assert depth(mgr, mgr.steps()[0]) <= 2 and mgr.files.base_name(mgr.latest()) is None
    check_folder(mgr, moving)


@pytest.mark.slow
def test_verify_and_restore_check_the_whole_chain(tmp_path):
    mgr = save_series(tmp_path, range(1, 6), keyframe_every=100, delta_depth=3)
    deepest = max(mgr.steps(), key=lambda s: depth(mgr, s))
    names = {mgr.path(s).name: s for s in mgr.steps()}
    middle = names[mgr.files.base_name(deepest)]
    assert depth(mgr, middle) >= 1
    # The middle of the chain written again with the same content (another
    # encoding, another index): its dependents were coded against that
    # content (format 1.3), so they still restore and verify.
    ls.save(ls.load(mgr.path(middle)), mgr.path(middle))
    same_tree(state(deepest), mgr.restore(deepest))
    with ls.open(mgr.path(deepest)) as ck:
        assert ck.verify() == []
    # Written again with other content: refused, naming it.
    ls.save(state(middle + 100), mgr.path(middle), compression="zstd")
    with pytest.raises(ls.BaseCheckpointError, match=mgr.path(middle).name):
        mgr.restore(deepest)
    # A byte flipped in the keyframe's data: verify of the deepest names the damaged tensor.
    mgr2 = save_series(tmp_path / "b", range(1, 6), keyframe_every=100, delta_depth=3)
    deep2 = max(mgr2.steps(), key=lambda s: depth(mgr2, s))
    keyframe = mgr2.path(deep2)
    while mgr2.files.base_name(int(keyframe.stem[5:])) is not None:
        keyframe = mgr2.directory / mgr2.files.base_name(int(keyframe.stem[5:]))
    with ls.open(keyframe) as ck:
        info = ck.info("model/w")
    data = bytearray(keyframe.read_bytes())
    data[info.offset + 100] ^= 0xFF
    keyframe.write_bytes(bytes(data))
    with ls.open(mgr2.path(deep2)) as ck:
        assert "model/w" in ck.verify()


@pytest.mark.slow
@pytest.mark.parametrize("bound", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_retention_keeps_exactly_the_kept_and_each_restorable(tmp_path, bound, seed):
    """Random metrics make keep_best keep and drop checkpoints anywhere in
    the tree (keyframes, centres, leaves), and a step is sometimes saved
    again: after every save, what is listed is exactly what the rules keep
    (no orphan base left behind), each restores bit-identical within the
    depth bound, and nothing else is in the folder."""
    rng = random.Random(seed)
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=2, keep_best=2, metric="loss",
                               keyframe_every=rng.choice([3, 5, 100]), delta_depth=bound)
    losses: dict[int, float] = {}
    kept: set[int] = set()
    for step in range(1, 13):
        if kept and rng.random() < 0.2:
            step = rng.choice(sorted(kept))  # saved again: what depends on it is rewritten first
        losses[step] = rng.random()
        mgr.save(step, state(step), metrics={"loss": losses[step]})
        listed = sorted(kept | {step})
        kept = set(listed[-2:]) | set(sorted(listed, key=lambda s: (losses[s], s))[:2])
        assert mgr.steps() == sorted(kept), (step, base_names(mgr))
        check_folder(mgr)
