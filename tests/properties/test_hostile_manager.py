"""A hostile manager folder: random damage to random checkpoint files between
random saves (issue #24, class 3).

Whatever happens to old files -- a flipped bit anywhere (raw or compressed,
keyframe or delta, tensor bytes, index or trailer), a file cut short or
emptied, a folder or a dangling link where the file was, a file deleted --
every save succeeds and is itself intact, and every listed step restores
exactly or is reported damaged by ``mgr.damaged()``, naming its file.

``LAZYSTORE_HOSTILE_EXAMPLES`` sets how many folders to build (the suite's
default keeps this to a few seconds; docs/reliability.md records a long run).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore.testing.strategies import same_tree
from tests.hypothesis_profiles import examples

EXAMPLES = int(os.environ.get("LAZYSTORE_HOSTILE_EXAMPLES") or examples(20))
FROZEN = np.random.default_rng(0).standard_normal(512).astype(np.float32)
MOVING = np.random.default_rng(1).standard_normal(512).astype(np.float32)


def state(step: int) -> dict:
    """Small: a frozen tensor (free in a delta), one that moves a little, the step."""
    return {"frozen": FROZEN, "w": (MOVING * np.float32(1 + 1e-6 * step)).astype(np.float32), "step": step}


def damage(path, kind: str, data) -> None:
    size = os.path.getsize(path) if os.path.isfile(path) and not os.path.islink(path) else 0
    if kind in ("flip", "truncate") and size == 0:
        kind = "delete"
    if kind == "flip":
        offset = data.draw(st.integers(0, size - 1), label="offset")
        with open(path, "r+b") as f:
            f.seek(offset)
            byte = f.read(1)[0]
            f.seek(offset)
            f.write(bytes([byte ^ (1 << data.draw(st.integers(0, 7), label="bit"))]))
    elif kind == "truncate":
        os.truncate(path, data.draw(st.integers(0, size - 1), label="length"))
    elif kind == "empty":
        _remove(path)
        open(path, "wb").close()
    elif kind == "folder":
        _remove(path)
        os.mkdir(path)
    elif kind == "dangling":
        _remove(path)
        os.symlink(path.parent / "nowhere.lzy", path)
    else:
        _remove(path)


def _remove(path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    elif os.path.lexists(path):
        os.remove(path)


KINDS = ["flip", "flip", "flip", "truncate", "empty", "folder", "dangling", "delete"]  # flips: most varied


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(delta=st.booleans(), compression=st.sampled_from([None, "zstd"]),
       keep_last=st.sampled_from([None, 2, 3]), rounds=st.integers(2, 8), data=st.data())
def test_every_save_succeeds_and_every_step_restores_or_is_reported(tmp_path_factory, delta, compression,
                                                                    keep_last, rounds, data):
    folder = tmp_path_factory.mktemp("hostile")
    mgr = ls.CheckpointManager(folder, keep_last=keep_last, compression=compression, delta=delta,
                               keyframe_every=3)
    for step in range(1, rounds + 1):
        mgr.save(step, state(step))  # never raises, whatever happened to the files before
        same_tree(state(step), mgr.restore(step))
        for _ in range(data.draw(st.integers(0, 2), label="damages")):
            steps = mgr.steps()
            if steps:
                victim = data.draw(st.sampled_from(steps), label="step")
                damage(mgr.path(victim), data.draw(st.sampled_from(KINDS), label="kind"), data)
    mgr.save(rounds + 1, state(rounds + 1))  # and once more after the last damage
    damaged = mgr.damaged()
    assert rounds + 1 in mgr.steps() and rounds + 1 not in damaged
    for step in mgr.steps():
        if step in damaged:
            assert mgr.path(step).name in damaged[step], damaged[step]  # reported by name
        else:
            same_tree(state(step), mgr.restore(step))
            with mgr.open(step) as ck:
                assert ck.verify() == []
    if keep_last is not None:
        # Retention still applied around the damage: keep_last intact steps,
        # and at most the chain of bases each damaged one names.
        intact = [s for s in mgr.steps() if s not in damaged]
        assert len(intact) <= keep_last + mgr.delta_depth * len(damaged), (intact, damaged)
