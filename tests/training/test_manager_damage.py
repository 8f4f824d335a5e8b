"""A manager folder with a damaged file in it (issue #24, classes 2 and 3).

One bad file costs that file, never the next save: saves go on, retention
still applies, a damaged checkpoint is never a base and never rewritten
into a file with fresh checksums, and the damage is reported by name (a
warning, and ``mgr.damaged()``)."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.strategies import same_tree

W = np.random.default_rng(3).standard_normal((64, 1024)).astype(np.float32)  # 256 KiB


def state(step: int) -> dict:
    """Weights that move a little each step (deltas pay), and the step."""
    return {"w": (W * np.float32(1 + 1e-6 * step)).astype(np.float32), "step": step}


def flip_bit(path, offset=None) -> None:
    """Flip one bit of ``path``, in the middle of its tensor bytes by default
    (the 256 KiB tensor dominates the file)."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2 if offset is None else offset)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))


def flip_index_bit(path) -> None:
    """Flip a bit near the end of ``path``: its index or trailer (opening fails)."""
    flip_bit(path, os.path.getsize(path) - 20)


def truncate(path) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def empty(path) -> None:
    os.truncate(path, 0)


def folder(path) -> None:
    os.remove(path)
    os.mkdir(path)


def dangling(path) -> None:
    os.remove(path)
    os.symlink(path.parent / "nowhere.lzy", path)


# Damage that opening the file finds (content damage needs its bytes checked: below).
DAMAGES = [flip_index_bit, truncate, empty, folder, dangling]


def restorable(mgr, step) -> bool:
    try:
        same_tree(state(step), mgr.restore(step))
    except (ls.LazyStoreError, OSError):
        return False
    return True


# ---------------------------------------------------------------------------
# class 3: one bad file never stops a save
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("delta", [False, True], ids=["keyframes", "delta"])
def test_saves_and_retention_go_on_around_a_damaged_step(tmp_path, caplog, damage, delta):
    mgr = ls.CheckpointManager(tmp_path, keep_last=2, compression="zstd", delta=delta, keyframe_every=4)
    for step in (1, 2):
        mgr.save(step, state(step))
    damage(mgr.path(2))
    with caplog.at_level(logging.WARNING, logger="lazystore"):
        for step in range(3, 9):
            mgr.save(step, state(step))  # never raises
    # Retention still applies: the two newest intact steps, and the damaged one, left for a person to look at.
    assert mgr.steps() == [2, 7, 8]
    assert list(mgr.damaged()) == [2] and str(mgr.path(2)) in mgr.damaged()[2]
    for step in (7, 8):
        assert restorable(mgr, step)
        with mgr.open(step) as ck:
            assert ck.verify() == []
    # Reported once, naming the file.
    warned = [r.getMessage() for r in caplog.records if str(mgr.path(2)) in r.getMessage()]
    assert len(warned) == 1, warned
    with pytest.raises((ls.LazyStoreError, OSError), match="step-000000000002"):
        mgr.restore(2)


def test_a_damaged_keyframe_is_never_a_base(tmp_path):
    # A flipped bit in a raw keyframe: opening it works, its bytes do not.
    mgr = ls.CheckpointManager(tmp_path, delta=True, keyframe_every=10)
    mgr.save(1, state(1))
    flip_bit(mgr.path(1))
    mgr.save(2, state(2))
    with mgr.open(2) as ck:
        assert ck.verify() == [] and "__lazystore_base__" not in ck.system_metadata  # a keyframe
    same_tree(state(2), mgr.restore(2))
    assert list(mgr.damaged()) == [1]


def test_a_damaged_previous_checkpoint_is_left_whole_and_the_save_goes_on(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keyframe_every=10)
    for step in (1, 2):
        mgr.save(step, state(step))
    assert mgr.open(1).system_metadata.get("__lazystore_base__")  # 1 is a delta against 2, 2 whole
    flip_bit(mgr.path(2))  # 1 decodes through 2: damaged too
    before = mgr.path(2).read_bytes()
    mgr.save(3, state(3))  # 2 would now be coded against 3: read checked, found damaged, left as it is
    assert mgr.path(2).read_bytes() == before
    same_tree(state(3), mgr.restore(3))
    assert sorted(mgr.damaged()) == [1, 2]


# ---------------------------------------------------------------------------
# class 2: a rewrite never turns unchecked bytes into a file with new checksums
# ---------------------------------------------------------------------------


def test_retention_never_rewrites_a_delta_over_a_damaged_raw_keyframe(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression=None, keep_last=1, keep_best=1, metric="loss")
    for step in (1, 2):
        mgr.save(step, state(step), metrics={"loss": step})  # 1 (the best) a delta against 2, a raw keyframe
    assert mgr.files.base_name(1) == mgr.path(2).name
    flip_bit(mgr.path(2))  # unchecked on read: raw
    mgr.save(3, state(3), metrics={"loss": 3})  # retention drops 2, so 1 would be rewritten from 2's bytes
    # No checkpoint that verifies clean holds anything but its own step's values.
    for step in mgr.steps():
        with mgr.open(step) as ck:
            clean = not ck.verify()
        if clean:
            assert restorable(mgr, step), step
    assert sorted(mgr.damaged()) == [1, 2]  # 1 decodes through 2: left as it was, and 2 with it
    assert mgr.steps() == [1, 2, 3]
    assert restorable(mgr, 3)


def test_a_damaged_delta_is_left_in_place_with_its_bases(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=2, keyframe_every=10)
    mgr.save(1, state(1))
    mgr.save(2, state(2))  # 1 a delta against 2
    flip_bit(mgr.path(1))
    before = {s: mgr.path(s).read_bytes() for s in (1, 2)}
    assert list(mgr.damaged()) == [1]  # found (saves read only what they rewrite)
    mgr.save(3, state(3))  # 2 would be coded against 3, but 1 names it: it stays, whole
    mgr.save(4, state(4))  # retention would now drop 1 and 2 (keep_last=2: 3 and 4)
    assert mgr.steps() == [1, 2, 3, 4]  # 1 kept as it was (never rewritten), and 2, which it names
    assert {s: mgr.path(s).read_bytes() for s in (1, 2)} == before
    assert list(mgr.damaged()) == [1]
    assert restorable(mgr, 2) and restorable(mgr, 3) and restorable(mgr, 4)
