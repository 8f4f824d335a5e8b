"""CheckpointManager(delta=True): the newest whole, older ones deltas against newer ones, retention that rebases."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.strategies import same_tree
from lazystore.training.saver_lock import LOCK_NAME

FROZEN = np.random.default_rng(5).standard_normal((256, 1024)).astype(np.float32)  # 1 MiB, never changes


def weights(step: int) -> np.ndarray:
    """A trained-looking tensor after ``step`` small optimizer steps: low bits change."""
    w = np.random.default_rng(1).standard_normal((128, 1024)).astype(np.float32)
    return (w * np.float32(1 + 1e-6 * step)).astype(np.float32)


def state(step: int) -> dict:
    return {"model": {"frozen": FROZEN, "w": weights(step)}, "step": step, "lr": 0.1 / (step + 1)}


def base_names(mgr) -> dict:
    return {s: mgr.files.base_name(s) for s in mgr.steps()}


def moving(step: int) -> dict:
    """A state whose every tensor changes at every step: each delta level costs a whole decode."""
    return {"model": {"w": weights(step)}, "step": step}


def depth(mgr, step: int) -> int:
    """How many deltas deep ``step`` is (0: a keyframe); every base listed."""
    names = {mgr.path(s).name: s for s in mgr.steps()}
    base = mgr.files.base_name(step)
    if base is None:
        return 0
    assert base in names, (step, base)
    return 1 + depth(mgr, names[base])


def restore_work(mgr, step: int) -> float:
    """Checkpoints' worth of changed bytes a restore of ``step`` decodes
    beyond its whole file (the share of each delta level that changed)."""
    names = {mgr.path(s).name: s for s in mgr.steps()}
    work = 0.0
    while mgr.files.base_name(step) is not None:
        work += mgr.files.facts(step).work
        step = names[mgr.files.base_name(step)]
    return work


def check_folder(mgr, state=state) -> None:
    """Every listed checkpoint restores bit-identical and verifies; its
    chain of bases is listed, holds at most ``keyframe_every`` checkpoints
    and its restore decodes at most ``delta_depth`` checkpoints' worth of
    changed bytes; the newest is whole; nothing else is in the folder."""
    for step in mgr.steps():
        same_tree(state(step), mgr.restore(step))
        with mgr.open(step) as ck:
            assert ck.verify() == []
        assert depth(mgr, step) < mgr.keyframe_every, (step, base_names(mgr))
        assert restore_work(mgr, step) <= mgr.delta_depth + 1e-9, (step, base_names(mgr))
    if mgr.steps():
        assert mgr.files.base_name(mgr.latest()) is None, base_names(mgr)
    assert sorted(set(os.listdir(mgr.directory)) - {LOCK_NAME}) == sorted(mgr.path(s).name for s in mgr.steps())


@pytest.mark.slow
def test_the_newest_is_whole_and_older_ones_deltas_against_newer_ones(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=3, delta_depth=1)
    for step in range(1, 8):
        mgr.save(step, state(step))
        assert mgr.files.base_name(step) is None  # every save is whole, and stays so until the next
    name = {s: mgr.path(s).name for s in mgr.steps()}
    # Chains of keyframe_every checkpoints, each ending in a whole one.
    assert base_names(mgr) == {1: name[2], 2: name[3], 3: None, 4: name[5], 5: name[6], 6: None, 7: None}
    check_folder(mgr)
    # A delta stores only what changed: the frozen tensor is stored once, in the newer file.
    with mgr.open(5) as ck, mgr.open(6) as keyframe:
        assert ck.info("model/frozen").stored_nbytes == 0
        assert ck.stored_nbytes < 0.6 * keyframe.stored_nbytes
    for step in mgr.steps():  # every file opens alone, its chain found beside it
        same_tree(state(step), ls.load(mgr.path(step)))


@pytest.mark.slow
@pytest.mark.parametrize("bound", [1, 2, 3])
def test_when_every_weight_changes_a_restore_reads_at_most_delta_depth_deltas(tmp_path, bound):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=8, delta_depth=bound)
    for step in range(1, 12):
        mgr.save(step, moving(step))
    depths = [depth(mgr, s) for s in mgr.steps()]
    assert max(depths) == bound, base_names(mgr)  # reached, never passed: then a whole one
    assert depths[-1] == 0 and all(mgr.path(s + 1).name == b for s, b in base_names(mgr).items() if b)
    check_folder(mgr, moving)


def test_delta_false_writes_keyframes_only(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, compression="zstd")
    for step in range(3):
        mgr.save(step, state(step))
    assert set(base_names(mgr).values()) == {None}


@pytest.mark.slow
def test_keep_last_rebases_the_kept_deltas_before_their_keyframe_goes(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=2, keyframe_every=4)
    for step in range(1, 10):
        mgr.save(step, state(step))
        check_folder(mgr)
        assert len(mgr.steps()) == min(step, 2)
        # One keyframe at a time: never a keyframe that no kept checkpoint needs.
        kept_keyframes = [s for s, b in base_names(mgr).items() if b is None]
        assert len(kept_keyframes) == 1, base_names(mgr)


@pytest.mark.slow
def test_keep_best_keeps_the_best_restorable_when_its_keyframe_goes(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=1, keep_best=1, metric="loss",
                               keyframe_every=3)
    losses = {1: 5.0, 2: 1.0, 3: 4.0, 4: 3.0, 5: 2.0, 6: 6.0, 7: 7.0, 8: 8.0}
    for step, loss in losses.items():
        mgr.save(step, state(step), metrics={"loss": loss})
        check_folder(mgr)
    assert mgr.steps() == [2, 8] and mgr.best() == 2
    assert mgr.metrics(2) == {"loss": 1.0}  # metrics survive rewriting


@pytest.mark.slow
@pytest.mark.parametrize("again", [1, 2, 3])
def test_saving_a_step_again_rewrites_what_depends_on_it(tmp_path, again):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=10)
    for step in (1, 2, 3):
        mgr.save(step, state(step))
    assert base_names(mgr) == {1: mgr.path(2).name, 2: mgr.path(3).name, 3: None}  # a chain two deep
    mgr.save(again, state(again))  # replaces a base 3 (and 2) were coded against, or nothing's base
    check_folder(mgr)
    assert mgr.steps() == [1, 2, 3]


@pytest.mark.slow
def test_a_new_manager_continues_the_series(tmp_path):
    for step in range(1, 6):
        mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=3, keep_last=3)
        mgr.save(step, state(step))
    check_folder(mgr)
    assert list(base_names(mgr).values()).count(None) == 1


@pytest.mark.slow
def test_a_manager_without_delta_still_keeps_the_bases_its_checkpoints_need(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=5)
    for step in range(1, 4):
        mgr.save(step, state(step))
    mgr.close()  # one saver per folder
    plain = ls.CheckpointManager(tmp_path, keep_last=2, compression="zstd")
    plain.save(4, state(4))
    assert plain.steps() == [3, 4]
    check_folder(plain)


@pytest.mark.slow
def test_background_saves_with_delta(tmp_path):
    with ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=3, keep_last=3) as mgr:
        futures = [mgr.save_async(step, state(step)) for step in range(1, 8)]
        for f in futures:
            f.result()
    check_folder(mgr)
    assert mgr.steps() == [5, 6, 7] and mgr.files.base_name(6) is not None


@pytest.mark.slow
def test_a_frozen_base_with_changing_adapters_costs_about_one_checkpoint(tmp_path):
    rng = np.random.default_rng(0)
    base = {f"layer{i}": rng.standard_normal((256, 1024)).astype(np.float32) for i in range(4)}  # 4 MiB
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=100)
    for step in range(10):
        adapters = {f"lora{i}": rng.standard_normal((8, 1024)).astype(np.float32) for i in range(4)}
        mgr.save(step, {"base": base, "adapters": adapters})
    sizes = [os.path.getsize(mgr.path(s)) for s in mgr.steps()]
    # One chain (a level costs little: delta_depth counts changed bytes), the
    # newest whole; each delta holds its adapters (random: incompressible),
    # the index, and nothing of the base.
    assert list(base_names(mgr).values()).count(None) == 1
    assert all(size < 4 * 8 * 1024 * 4 + 8192 for size in sizes[:-1]), sizes
    same_tree({"base": base, "adapters": adapters}, mgr.restore())


@pytest.mark.parametrize("bad", [{"delta": 1}, {"delta": "yes"}, {"keyframe_every": 0}, {"keyframe_every": 2.5}])
def test_bad_delta_arguments(tmp_path, bad):
    with pytest.raises(ls.InvalidInputError):
        ls.CheckpointManager(tmp_path, **bad)
