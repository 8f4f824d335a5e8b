"""Kill a saving process at random moments: the checkpoint survives intact.

A child process saves new versions of a checkpoint in a loop, with
``ls.save`` and with ``CheckpointManager.save``; the test SIGKILLs it at a
random moment, many times. After every kill the target must open, verify
clean and hold exactly one complete version (all tensors and the metadata
agree on one version number), and the next save must clear the dead
writer's temporary file.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lazystore as ls
from lazystore.training.saver_lock import LOCK_NAME
from tests.properties.killing import one_version, run_and_kill

KILLS = int(os.environ.get("LAZYSTORE_KILLS", "12"))  # per writer kind; more in a long run

SAVER = textwrap.dedent(
    """
    import sys, numpy as np, lazystore as ls
    kind, target, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mgr = ls.CheckpointManager(target, keep_last=2) if kind == "manager" else None
    if kind == "retention":  # small checkpoints, one kept: kills land in retention often
        mgr = ls.CheckpointManager(target, keep_last=1)
    print("ready", flush=True)
    version = start
    while True:
        version += 1
        # ~24 MiB per version, several tensors, half of them compressed, so
        # kills land in data, in the index and around the rename.
        state = {f"t{i}": np.full((768, 1024), version, np.float64 if i % 2 else np.float32)
                 for i in range(6)}
        if kind == "retention":
            mgr.save(version, {"t0": np.full(16, version, np.float32)}, metrics={"version": version})
        elif kind == "manager":
            mgr.save(version, state, metrics={"version": version})
        elif kind == "sharded":  # 4 MiB shards: kills land in shards, between renames, in the index
            ls.save(state, target, compression="zstd" if version % 2 else None,
                    metadata={"version": version}, max_shard_size=4 << 20)
        else:
            ls.save(state, target, compression="zstd" if version % 2 else None,
                    metadata={"version": version})
    """
)


def _save_then_kill(kind: str, target, start: int, rng: random.Random) -> None:
    run_and_kill(SAVER, [kind, str(target), str(start)], rng, longest=0.6)


@pytest.mark.slow
def test_killed_ls_save_leaves_one_complete_version(tmp_path):
    rng = random.Random(1234)
    target = tmp_path / "ck.lzy"
    ls.save({f"t{i}": np.zeros((768, 1024), np.float64 if i % 2 else np.float32) for i in range(6)},
            target, metadata={"version": 0})
    last = 0
    mid_save = 0
    for _ in range(KILLS):
        _save_then_kill("save", target, last, rng)
        with ls.open(target) as ck:
            assert ck.verify() == []
            version = one_version(ck)
            assert ck.metadata == {"version": version}
            assert version >= last  # never goes back to an older version
            last = version
        # The dead writer's temporary file is hidden and never mistaken for the target.
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ck.lzy"]
        assert all(n.startswith(".ck.lzy.") and n.endswith(".partial") for n in leftovers)
        mid_save += bool(leftovers)
    # The kills must really have interrupted saves, or this proves nothing.
    print(f"ls.save: {KILLS} kills survived, {mid_save} of them mid-save, last version {last}")
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed mid-save"
    ls.save({"x": np.ones(2)}, tmp_path / "other.lzy")  # any save in the folder cleans up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.lzy", "other.lzy"]


@pytest.mark.slow
def test_killed_manager_save_never_lists_a_broken_checkpoint(tmp_path):
    rng = random.Random(99)
    folder = tmp_path / "ckpts"
    last = 0
    mid_save = 0
    for _ in range(KILLS):
        _save_then_kill("manager", folder, last, rng)
        mgr = ls.CheckpointManager(folder, keep_last=2)
        steps = mgr.steps()
        assert len(steps) <= 3  # keep_last=2, plus one saved just before a kill in retention
        for step in steps:
            with mgr.open(step) as ck:
                assert ck.verify() == []
                assert one_version(ck) == step
            assert mgr.metrics(step) == {"version": step}
        if steps:
            assert steps[-1] >= last
            last = steps[-1]
        # Anything else in the folder is a dead writer's hidden temporary file.
        others = [p.name for p in folder.iterdir() if p.name not in {LOCK_NAME, *(mgr.path(s).name for s in steps)}]
        assert all(n.startswith(".step-") and n.endswith(".partial") for n in others), others
        mid_save += bool(others)
    assert last > 0, "the saver never completed a checkpoint; kill later"
    print(f"CheckpointManager.save: {KILLS} kills survived, {mid_save} of them mid-save, last step {last}")
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed mid-save"
    # The next save into the folder removes every temporary file the kills left.
    mgr = ls.CheckpointManager(folder, keep_last=2)
    mgr.save(last + 1, {"t0": np.full(4, last + 1, np.float32)}, metrics={"version": last + 1})
    assert sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME) == [mgr.path(s).name for s in mgr.steps()]


@pytest.mark.slow
def test_killed_sharded_save_leaves_one_complete_save(tmp_path):
    rng = random.Random(4321)
    folder = tmp_path / "ckpt"
    ls.save({f"t{i}": np.zeros((768, 1024), np.float64 if i % 2 else np.float32) for i in range(6)},
            folder, metadata={"version": 0}, max_shard_size=4 << 20)
    last = 0
    mid_save = 0
    for _ in range(KILLS):
        _save_then_kill("sharded", folder, last, rng)
        with ls.open(folder) as ck:  # never refused
            assert ck.verify() == []
            version = one_version(ck)
            assert ck.metadata == {"version": version} and version >= last
            last = version
        # What a killed save leaves is hidden (staging) or not named by the index.
        index = json.loads((folder / "lazystore.index.json").read_text())
        named = set(index["weight_map"].values()) | {"lazystore.index.json"}
        leftovers = [p.name for p in folder.iterdir() if p.name not in named]
        mid_save += bool(leftovers)
    print(f"sharded save: {KILLS} kills survived, {mid_save} of them mid-save, last version {last}")
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed mid-save"
    # The next save removes everything the kills left.
    ls.save({"t0": np.ones(3)}, folder, max_shard_size=1 << 20)
    index = json.loads((folder / "lazystore.index.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == sorted({"lazystore.index.json", *index["weight_map"].values()})


@pytest.mark.slow
def test_killed_manager_in_retention_keeps_a_restorable_step(tmp_path):
    rng = random.Random(7)
    folder = tmp_path / "ckpts"
    last = 0
    before: list[int] = []
    for _ in range(KILLS):
        _save_then_kill("retention", folder, last, rng)
        mgr = ls.CheckpointManager(folder, keep_last=1)
        steps = mgr.steps()
        # The newest step, plus what a kill in its retention left: the step
        # before it, or, if it was the child's first save, what the last
        # kill left (so a kill landing in retention twice in a row leaves
        # three). None only if the first save never finished.
        assert steps or last == 0, steps
        if steps:
            assert set(steps[:-1]) <= {*before, steps[-1] - 1}, (before, steps)
        before = steps
        for step in steps:
            assert float(mgr.restore(step)["t0"][0]) == step
        if steps:
            assert steps[-1] >= last
            last = steps[-1]
    assert last > KILLS, "the saver barely saved; kill later"


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_reader_keeps_its_version_while_the_file_is_replaced(tmp_path, compression):
    target = tmp_path / "ck.lzy"
    ls.save({"w": np.full((512, 512), 1.0, np.float32)}, target, compression=compression)
    with ls.open(target) as ck:
        before = ck["w"].copy()
        code = ("import sys, numpy as np, lazystore as ls\n"
                "ls.save({'w': np.full((512, 512), 2.0, np.float32), 'new': np.ones(3)}, sys.argv[1],"
                f" compression={compression!r})\n")
        subprocess.run([sys.executable, "-c", code, str(target)], check=True, timeout=120)
        # The open view still reads the old version, whole and verified.
        assert np.array_equal(ck["w"], before) and "new" not in ck
        assert ck.verify() == []
        assert np.array_equal(ck.get_slice("w")[10:20], before[10:20])
    with ls.open(target) as ck:
        assert float(ck["w"][0, 0]) == 2.0 and "new" in ck
