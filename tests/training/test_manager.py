"""CheckpointManager: retention, best step, history across restarts, failed saves."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import lazystore as ls
from lazystore.testing.strategies import same_tree
from lazystore.training.entries import MANAGER_KEY
from lazystore.training.saver_lock import LOCK_NAME
from lazystore.training.step_files import checkpoint_name


def state(step):
    return {"w": np.full(4, step, dtype=np.float32), "step": step, "opt": {"lr": 0.1 / (step + 1)}}


def files(d):
    """The folder's files, but the lock file a saving manager holds."""
    return sorted(n for n in os.listdir(d) if n != LOCK_NAME)


def test_file_names_and_layout(tmp_path):
    mgr = ls.CheckpointManager(tmp_path / "new" / "dir")  # created
    path = mgr.save(123, state(123), metrics={"loss": 0.5})
    assert path == tmp_path / "new" / "dir" / "step-000000000123.lzy"
    assert files(mgr.directory) == ["step-000000000123.lzy"]
    assert checkpoint_name(10**13) == "step-10000000000000.lzy"
    with ls.open(path) as ck:
        assert ck.system_metadata[MANAGER_KEY]["step"] == 123
        assert ck.metadata == {}


def test_empty_manager(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, metric="loss")
    assert mgr.steps() == [] and mgr.latest() is None and mgr.best() is None
    with pytest.raises(ls.CheckpointNotFoundError, match="no checkpoints"):
        mgr.restore()
    with pytest.raises(ls.CheckpointNotFoundError):
        mgr.open()


def test_steps_latest_restore_open(tmp_path):
    mgr = ls.CheckpointManager(tmp_path)
    for step in (30, 10, 20):
        mgr.save(step, state(step))
    assert mgr.steps() == [10, 20, 30] and mgr.latest() == 30
    same_tree(state(30), mgr.restore())
    same_tree(state(10), mgr.restore(10))
    with mgr.open() as ck:
        assert list(ck) == ["w"] and ck["w"][0] == 30
    with mgr.open(20) as ck:
        assert ck["w"][0] == 20
    with pytest.raises(ls.CheckpointNotFoundError, match=r"step 15 .*\[10, 20, 30\]"):
        mgr.restore(15)


def test_save_replaces_the_same_step(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, metric="loss")
    mgr.save(5, state(5), metrics={"loss": 2.0})
    mgr.save(5, state(6), metrics={"loss": 1.0})
    assert mgr.steps() == [5] and mgr.metrics(5) == {"loss": 1.0}
    same_tree(state(6), mgr.restore(5))


def test_other_files_are_ignored(tmp_path):
    for name in ("step-1.lzy", "step-000000000001.lzy.bak", "notes.txt", "step-00000000000x.lzy"):
        (tmp_path / name).write_text("x")
    mgr = ls.CheckpointManager(tmp_path, keep_last=1)
    mgr.save(1, state(1))
    mgr.save(2, state(2))
    assert mgr.steps() == [2]
    assert "notes.txt" in files(tmp_path) and "step-1.lzy" in files(tmp_path)


# ---------------------------------------------------------------------------
# retention
# ---------------------------------------------------------------------------


def test_keep_everything_by_default(tmp_path):
    mgr = ls.CheckpointManager(tmp_path)
    for step in range(6):
        mgr.save(step, state(step))
    assert mgr.steps() == list(range(6))


def test_keep_last(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=2)
    for step in range(1, 6):
        mgr.save(step, state(step))
        assert mgr.steps() == list(range(max(1, step - 1), step + 1))
    assert files(tmp_path) == [checkpoint_name(4), checkpoint_name(5)]


@pytest.mark.parametrize("mode, expected", [("min", [2, 4]), ("max", [1, 5])])
def test_keep_best(tmp_path, mode, expected):
    mgr = ls.CheckpointManager(tmp_path, keep_best=2, metric="loss", mode=mode)
    for step, loss in [(1, 5.0), (2, 1.0), (3, 3.0), (4, 2.0), (5, 9.0)]:
        mgr.save(step, state(step), metrics={"loss": loss, "other": -loss})
    assert mgr.steps() == expected
    assert mgr.best() == expected[0] if mode == "min" else mgr.best() == 5


def test_keep_last_and_keep_best_together(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=2, keep_best=1, metric="loss")
    losses = {1: 3.0, 2: 0.5, 3: 2.0, 4: 4.0, 5: 1.0, 6: 0.7}
    kept = []
    for step, loss in losses.items():
        mgr.save(step, state(step), metrics={"loss": loss})
        kept.append(mgr.steps())
    assert kept == [[1], [1, 2], [2, 3], [2, 3, 4], [2, 4, 5], [2, 5, 6]]
    assert mgr.best() == 2 and mgr.latest() == 6


def test_keep_best_only_deletes_a_new_worse_checkpoint(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_best=1, metric="acc", mode="max")
    mgr.save(1, state(1), metrics={"acc": 0.9})
    mgr.save(2, state(2), metrics={"acc": 0.5})
    assert mgr.steps() == [1]


def test_checkpoints_without_the_metric_are_kept_only_by_keep_last(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=1, keep_best=1, metric="loss")
    mgr.save(1, state(1), metrics={"loss": 1.0})
    mgr.save(2, state(2))
    mgr.save(3, state(3), metrics={"acc": 1.0})
    assert mgr.steps() == [1, 3] and mgr.best() == 1


def test_inf_nan_and_ties(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, metric="loss")
    mgr.save(1, state(1), metrics={"loss": math.nan})
    assert mgr.best() is None  # NaN is never best
    mgr.save(2, state(2), metrics={"loss": math.inf})
    assert mgr.best() == 2
    mgr.save(3, state(3), metrics={"loss": 0.25})
    mgr.save(4, state(4), metrics={"loss": 0.25})
    assert mgr.best() == 3  # ties: the earlier step
    assert math.isnan(mgr.metrics(1)["loss"]) and mgr.metrics(2) == {"loss": math.inf}
    maxed = ls.CheckpointManager(tmp_path, metric="loss", mode="max")
    assert maxed.best() == 2


def test_metric_values_of_every_kind(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, metric="loss")
    metrics = {"py_float": 0.5, "py_int": 2**70, "np_float": np.float32(0.25), "np_int": np.int64(3),
               "np_0d": np.array(1.5), "torch_0d": torch.tensor(0.125), "torch_1": torch.tensor([7]),
               "neg_zero": -0.0}
    mgr.save(1, state(1), metrics=metrics)
    got = ls.CheckpointManager(tmp_path).metrics(1)
    assert got == {"py_float": 0.5, "py_int": 2**70, "np_float": 0.25, "np_int": 3, "np_0d": 1.5,
                   "torch_0d": 0.125, "torch_1": 7, "neg_zero": 0.0}
    assert type(got["np_int"]) is int and type(got["np_float"]) is float
    assert math.copysign(1, got["neg_zero"]) == -1


# ---------------------------------------------------------------------------
# restarts
# ---------------------------------------------------------------------------


def test_a_new_manager_sees_the_same_history(tmp_path):
    first = ls.CheckpointManager(tmp_path, keep_last=2, keep_best=1, metric="loss")
    for step, loss in [(1, 0.9), (2, 0.1), (3, 0.5), (4, 0.6)]:
        first.save(step, state(step), metrics={"loss": loss})
    assert first.steps() == [2, 3, 4] and first.best() == 2
    del first

    again = ls.CheckpointManager(tmp_path, keep_last=2, keep_best=1, metric="loss")
    assert again.steps() == [2, 3, 4] and again.best() == 2 and again.latest() == 4
    assert again.metrics(2) == {"loss": 0.1}
    # retention continues from the files: the old best survives, the oldest non-best goes
    again.save(5, state(5), metrics={"loss": 0.7})
    assert again.steps() == [2, 4, 5] and again.best() == 2
    again.save(6, state(6), metrics={"loss": 0.05})
    assert again.steps() == [5, 6] and again.best() == 6

    # opening a manager never deletes anything, even with stricter retention
    strict = ls.CheckpointManager(tmp_path, keep_last=1)
    assert strict.steps() == [5, 6]


def test_a_manager_sees_files_another_process_wrote(tmp_path):
    reader = ls.CheckpointManager(tmp_path, metric="loss")
    writer = ls.CheckpointManager(tmp_path, metric="loss")
    writer.save(1, state(1), metrics={"loss": 1.0})
    assert reader.steps() == [1] and reader.best() == 1
    writer.save(1, state(1), metrics={"loss": 2.0})  # replaced: cached metrics are refreshed
    writer.save(2, state(2), metrics={"loss": 1.5})
    assert reader.best() == 2


def test_a_plain_file_in_the_folder_has_no_metrics(tmp_path):
    ls.save(state(7), tmp_path / checkpoint_name(7))
    mgr = ls.CheckpointManager(tmp_path, metric="loss")
    assert mgr.steps() == [7] and mgr.metrics(7) == {} and mgr.best() is None
    same_tree(state(7), mgr.restore())


# ---------------------------------------------------------------------------
# failed and interrupted saves
# ---------------------------------------------------------------------------


def test_a_save_that_fails_midway_changes_nothing(tmp_path, monkeypatch):
    mgr = ls.CheckpointManager(tmp_path, keep_last=1, keep_best=1, metric="loss")
    mgr.save(1, state(1), metrics={"loss": 0.1})
    mgr.save(2, state(2), metrics={"loss": 0.2})
    before = {name: (tmp_path / name).read_bytes() for name in files(tmp_path)}

    calls = []
    real_add = ls.Writer.add

    def failing_add(self, name, array, **kw):
        calls.append(name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_add(self, name, array, **kw)

    monkeypatch.setattr(ls.Writer, "add", failing_add)
    big = {"a": np.zeros(1000), "b": np.ones(1000), "c": np.ones(10), "step": 3}
    with pytest.raises(OSError, match="No space"):
        mgr.save(3, big, metrics={"loss": 0.0})
    monkeypatch.undo()
    assert calls == ["a", "b"]
    # nothing listed, nothing deleted, no temporary file left
    assert mgr.steps() == [1, 2] and mgr.best() == 1
    assert {name: (tmp_path / name).read_bytes() for name in files(tmp_path)} == before
    # the same step saves fine afterwards
    mgr.save(3, big, metrics={"loss": 0.0})
    assert mgr.steps() == [3]


def test_bad_state_is_refused_before_anything_is_written(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=1)
    mgr.save(1, state(1))
    with pytest.raises(ls.InvalidInputError):
        mgr.save(2, {"w": np.zeros(3), "bad": object()})
    assert files(tmp_path) == [checkpoint_name(1)]


@pytest.mark.slow
def test_a_crash_mid_save_is_never_listed_and_is_cleaned_up(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=2)
    mgr.save(1, state(1))
    mgr.close()  # one saver per folder: the child saves next
    code = textwrap.dedent(f"""
        import os, numpy as np, lazystore as ls
        real_add = ls.Writer.add
        def add(self, name, array, **kw):
            real_add(self, name, array, **kw)
            if name == "b":
                os._exit(3)  # killed mid-save: no cleanup runs
        ls.Writer.add = add
        mgr = ls.CheckpointManager({str(tmp_path)!r}, keep_last=2)
        mgr.save(2, {{"a": np.zeros(100), "b": np.ones(100), "c": np.ones(100)}})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    partial = [n for n in files(tmp_path) if n.endswith(".partial")]
    assert len(partial) == 1 and partial[0].startswith(".step-000000000002.lzy.")

    again = ls.CheckpointManager(tmp_path, keep_last=2)
    assert again.steps() == [1] and again.latest() == 1
    same_tree(state(1), again.restore())
    again.save(2, state(2))
    assert files(tmp_path) == [checkpoint_name(1), checkpoint_name(2)]  # the stale temporary is gone


# ---------------------------------------------------------------------------
# torch state and arguments
# ---------------------------------------------------------------------------


def test_torch_state_and_map_location(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    s = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1, "mask": torch.zeros(4096)}
    mgr = ls.CheckpointManager(tmp_path, compression="zstd")
    mgr.save(1, s, metrics={"loss": torch.tensor(0.3)})
    same_tree(s, mgr.restore(map_location="cpu"))
    with mgr.open() as ck:
        assert "optimizer/state/0/exp_avg" in ck
        assert ck.info("mask").compression == "zstd"


@pytest.mark.parametrize("kwargs", [
    {"keep_last": 0}, {"keep_last": -1}, {"keep_last": True}, {"keep_last": 1.5}, {"keep_last": "2"},
    {"keep_best": 0}, {"keep_best": 1}, {"keep_best": 2, "metric": 3}, {"metric": "loss", "mode": "best"},
    {"compression": "gzip"}, {"compression": 3},
], ids=repr)
def test_bad_arguments(tmp_path, kwargs):
    with pytest.raises(ls.InvalidInputError):
        ls.CheckpointManager(tmp_path, **kwargs)


@pytest.mark.parametrize("step", [-1, True, 1.0, "3", None], ids=repr)
def test_bad_steps(tmp_path, step):
    mgr = ls.CheckpointManager(tmp_path)
    with pytest.raises(ls.InvalidInputError):
        mgr.save(step, state(0))
    assert files(tmp_path) == []


@pytest.mark.parametrize("metrics", [{"loss": "low"}, {"loss": True}, {"loss": 1j}, {"loss": None},
                                     {1: 0.5}, [("loss", 1.0)], {"loss": np.zeros(3)}], ids=repr)
def test_bad_metrics(tmp_path, metrics):
    mgr = ls.CheckpointManager(tmp_path)
    with pytest.raises(ls.InvalidInputError):
        mgr.save(1, state(1), metrics=metrics)
    assert files(tmp_path) == []


def test_best_needs_a_metric(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="metric"):
        ls.CheckpointManager(tmp_path).best()


def test_numpy_int_steps(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, keep_last=np.int64(2))
    mgr.save(np.int64(4), state(4))
    assert mgr.steps() == [4] and type(mgr.steps()[0]) is int
    same_tree(state(4), mgr.restore(np.int32(4)))
