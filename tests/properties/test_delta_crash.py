"""Kill a process at random moments while it saves a delta series.

A child saves checkpoints with ``CheckpointManager(delta=True)``, blocking
or in the background, with a short retention and keyframe period so that
kills land in the save of the newest (whole) checkpoint, in the coding of
the one before it against it (a rewrite, atomic), between the two (two
whole files), in retention's deletions and rebasing. After every kill, each listed checkpoint must restore
bit-identical to the state of its step and verify down its chain (its base
present and the very file it was coded against), and nothing partial may
be listed.
"""

from __future__ import annotations

import random
import textwrap

import numpy as np
import pytest

import lazystore as ls
from lazystore.training.saver_lock import LOCK_NAME
from tests.properties.killing import run_and_kill
from tests.properties.test_crash_safety import KILLS

pytestmark = pytest.mark.slow  # (pyproject.toml: the quick tier leaves these out)

SAVER = textwrap.dedent(
    """
    import sys, numpy as np, lazystore as ls
    sys.path.insert(0, sys.argv[4])
    from tests.properties.test_delta_crash import state
    mode, target, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mgr = ls.CheckpointManager(target, delta=True, keep_last=3, keyframe_every=3, compression="zstd")
    print("ready", flush=True)
    step = start
    while True:
        step += 1
        (mgr.save if mode == "blocking" else mgr.save_async)(step, state(step), metrics={"step": step})
    """
)

_W = np.random.default_rng(3).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB, changes a little
_FROZEN = np.random.default_rng(4).standard_normal((1024, 1024)).astype(np.float32)  # 4 MiB, never changes


def state(step: int) -> dict:
    """Checkpoint ``step``: weights nudged in their low bits, a frozen part,
    and a tensor filled with the step (so a mix of two saves shows)."""
    return {"w": (_W * np.float32(1 + 1e-6 * step)).astype(np.float32), "frozen": _FROZEN,
            "moments": np.full((512, 1024), step, np.float64), "step": step}


def _check_folder(folder) -> int:
    mgr = ls.CheckpointManager(folder, delta=True, keep_last=3, keyframe_every=3, compression="zstd")
    # More than keep_last=3 when kills landed in retention (rebasing makes it
    # longer); the next complete retention trims them (checked at the end).
    steps = mgr.steps()
    for step in steps:
        got = mgr.restore(step)
        want = state(step)
        assert got["step"] == step
        for name in ("w", "frozen", "moments"):
            assert got[name].tobytes() == want[name].tobytes(), (step, name)
        with mgr.open(step) as ck:
            assert ck.verify() == []
        assert mgr.metrics(step) == {"step": step}
    listed = {mgr.path(s).name for s in steps}
    others = [p.name for p in folder.iterdir() if p.name not in listed | {LOCK_NAME}]
    assert all(n.startswith(".step-") and n.endswith(".partial") for n in others), others
    return steps[-1] if steps else 0


@pytest.mark.parametrize("mode", ["blocking", "background"])
def test_killed_delta_series_leaves_every_listed_checkpoint_restorable(tmp_path, mode):
    from tests.paths import REPO

    rng = random.Random(2024 if mode == "blocking" else 2025)
    folder = tmp_path / "ckpts"
    last = 0
    for _ in range(KILLS):
        run_and_kill(SAVER, [mode, str(folder), str(last), str(REPO)], rng, longest=1.5)
        found = _check_folder(folder)
        assert found >= last
        last = found
    assert last >= 6, f"the saver got only to step {last}: too few rebasings to test; kill later"
    # One complete save cleans up: keep_last steps, the temporary files of the kills gone.
    mgr = ls.CheckpointManager(folder, delta=True, keep_last=3, keyframe_every=3, compression="zstd")
    mgr.save(last + 1, state(last + 1), metrics={"step": last + 1})
    assert mgr.steps() == [last - 1, last, last + 1]
    assert sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME) == [mgr.path(s).name for s in mgr.steps()]
    _check_folder(folder)
    print(f"delta series ({mode}): {KILLS} kills survived, last step {last}")
