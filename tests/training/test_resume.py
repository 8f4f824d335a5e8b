"""A training run checkpointed at step N and resumed in a fresh process ends
bit-identical to an uninterrupted run (tests/training/resume_train.py is the run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import lazystore as ls
from lazystore.testing.strategies import same_tree

pytestmark = pytest.mark.slow  # (pyproject.toml: the quick tier leaves these out)

SCRIPT = Path(__file__).with_name("resume_train.py")
N = 7  # odd: the checkpoint falls mid-epoch and mid-way through a StepLR period


def start(*args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err


def train(*args) -> None:
    finish(start(*args))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("resume")
    # The uninterrupted run and the first half are independent processes.
    full = start("full", "--steps", 2 * N, "--out", d / "full.lzy")
    first = start("first", "--steps", N, "--ckdir", d / "ckpts")
    finish(full)
    finish(first)
    # The second half: a fresh process that has only the checkpoint.
    train("resume", "--steps", 2 * N, "--ckdir", d / "ckpts", "--out", d / "resumed.lzy")
    return d


def test_resumed_run_is_bit_identical(runs):
    full, resumed = ls.load(runs / "full.lzy"), ls.load(runs / "resumed.lzy")
    assert full["step"] == resumed["step"] == 2 * N
    # parameters and batch-norm buffers, AdamW moments and steps, StepLR, every RNG,
    # epoch, best loss and the loss history: same types, same bits
    same_tree(full, resumed)
    for name in ("model", "optimizer", "scheduler", "rng"):
        same_tree(full[name], resumed[name])
    # the writer is deterministic, so identical state means identical files
    assert (runs / "full.lzy").read_bytes() == (runs / "resumed.lzy").read_bytes()


def test_the_run_really_trained(runs):
    full = ls.load(runs / "full.lzy")
    assert len(full["losses"]) == 2 * N and full["best_loss"] == min(full["losses"])
    assert full["scheduler"]["last_epoch"] == 2 * N // 3
    assert full["optimizer"]["param_groups"][0]["lr"] < 1e-2  # StepLR decayed it
    assert full["optimizer"]["state"][0]["step"].item() == 2 * N
    assert full["model"]["bn.num_batches_tracked"].item() == 2 * N
    assert isinstance(full["model"]["bn.running_var"], torch.Tensor)
    assert type(full["rng"]["python"]) is tuple and type(full["rng"]["python"][1]) is tuple
    assert full["rng"]["data"]["state"]["state"].bit_length() > 64  # PCG64's 128-bit state: a plain int


def test_the_checkpoint_is_the_run_at_step_n(runs):
    mgr = ls.CheckpointManager(runs / "ckpts", metric="loss")
    assert mgr.latest() == N
    first = mgr.restore()
    full = ls.load(runs / "full.lzy")
    assert first["step"] == N
    assert first["losses"] == full["losses"][:N]  # the same first N steps, bit for bit
    assert mgr.best() in mgr.steps()


def test_resuming_without_the_rng_state_diverges(runs, tmp_path):
    """The comparison is sensitive: leaving out the RNG state changes the result."""
    train("resume", "--steps", 2 * N, "--ckdir", runs / "ckpts", "--out", tmp_path / "norng.lzy", "--skip-rng")
    full, norng = ls.load(runs / "full.lzy"), ls.load(tmp_path / "norng.lzy")
    assert full["losses"][:N] == norng["losses"][:N]
    assert full["losses"][N:] != norng["losses"][N:]
    with pytest.raises(AssertionError):
        same_tree(full["model"], norng["model"])
