"""Kill a process at random moments while it saves in the background.

The child trains for real in miniature: it saves with ``save_async``
(CheckpointManager with retention, or plain ``ls.save_async``), then at once
changes the state in place, as the next training step would, while the
previous save is still being written. The test SIGKILLs it at random
moments. After every kill the last complete checkpoint must be restorable,
every listed checkpoint must verify and hold exactly one version (the one
of its step: the snapshot, not the state changed after the call), and
nothing partial may be listed.
"""

from __future__ import annotations

import random
import textwrap

import numpy as np
import pytest

import lazystore as ls
from lazystore.training.saver_lock import LOCK_NAME
from tests.properties.killing import one_version, run_and_kill
from tests.properties.test_crash_safety import KILLS as SAVE_KILLS

pytestmark = pytest.mark.slow  # (pyproject.toml: the quick tier leaves these out)

SAVER = textwrap.dedent(
    """
    import sys, numpy as np, torch, lazystore as ls
    kind, target, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # ~20 MiB: torch tensors and numpy arrays, a scalar, half the saves compressed.
    state = {"model": {f"w{i}": torch.zeros(512, 1024) for i in range(6)},
             "moments": [np.zeros((512, 1024), np.float64) for _ in range(2)], "version": 0}

    def train(version):  # in place, right after save() returns: the snapshot must not see it
        for t in state["model"].values():
            t.fill_(version)
        for m in state["moments"]:
            m.fill(version)
        state["version"] = version

    mgr = ls.CheckpointManager(target, keep_last=2, compression="zstd") if kind == "manager" else None
    version = start
    train(version)
    print("ready", flush=True)
    while True:
        if kind == "manager":
            mgr.save_async(version, state, metrics={"version": version})
        else:
            ls.save_async(state, target, compression="zstd" if version % 2 else None)
        version += 1
        train(version)
    """
)


def _check(path) -> int:
    with ls.open(path) as ck:
        assert ck.verify() == []
        version = one_version(ck)
    assert ls.load(path)["version"] == version  # the scalar was captured with the tensors
    return version


# Each kill here starts a child that imports torch (seconds): half the kills
# of the plain crash tests keep CI short; LAZYSTORE_KILLS scales both.
KILLS = max(4, SAVE_KILLS // 2)


def _save_then_kill(kind: str, target, start: int, rng: random.Random) -> None:
    run_and_kill(SAVER, [kind, str(target), str(start)], rng, longest=1.0)


def test_killed_background_manager_saves_leave_the_last_checkpoint_restorable(tmp_path):
    rng = random.Random(2024)
    folder = tmp_path / "ckpts"
    last = 0
    mid_save = 0
    for _ in range(KILLS):
        _save_then_kill("manager", folder, last + 1, rng)
        mgr = ls.CheckpointManager(folder, keep_last=2)
        steps = mgr.steps()
        assert len(steps) <= 3, steps  # keep_last=2, plus one saved just before a kill in retention
        for step in steps:
            assert _check(mgr.path(step)) == step
            assert mgr.metrics(step) == {"version": step}
        if steps:
            assert steps[-1] >= last
            last = steps[-1]
            restored = mgr.restore()
            assert restored["version"] == last and float(restored["model"]["w0"][0, 0]) == last
        others = [p.name for p in folder.iterdir() if p.name not in {LOCK_NAME, *(mgr.path(s).name for s in steps)}]
        assert all(n.startswith(".step-") and n.endswith(".partial") for n in others), others
        mid_save += bool(others)
    assert last > 0, "the saver never completed a checkpoint; kill later"
    print(f"background manager saves: {KILLS} kills, {mid_save} of them mid-save, last step {last}")
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed mid-save"


def test_killed_background_ls_saves_leave_one_complete_version(tmp_path):
    rng = random.Random(77)
    target = tmp_path / "ck.lzy"
    ls.save({"model": {"w0": np.zeros(4, np.float32)}, "version": 0}, target)
    last = 0
    mid_save = 0
    for _ in range(KILLS):
        _save_then_kill("save", target, last + 1, rng)
        version = _check(target)
        assert version >= last
        last = version
        leftovers = [p.name for p in tmp_path.iterdir() if p.name != "ck.lzy"]
        assert all(n.startswith(".ck.lzy.") and n.endswith(".partial") for n in leftovers), leftovers
        mid_save += bool(leftovers)
    assert last > 0, "the saver never completed a save; kill later"
    print(f"background ls.save: {KILLS} kills, {mid_save} of them mid-save, last version {last}")
    assert mid_save >= KILLS // 3, f"only {mid_save} of {KILLS} kills landed mid-save"
