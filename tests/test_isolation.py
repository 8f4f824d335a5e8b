"""Every test starts from the same process-wide settings, whatever ran before
it (tests/isolation.py, applied to every test by tests/conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from tests.isolation import restored_settings
from tests.paths import REPO

torch = pytest.importorskip("torch")
from lazystore.torch import safe_open, save_file  # imported after the skip


def snapshot() -> dict:
    return {
        "deterministic": (torch.are_deterministic_algorithms_enabled(),
                          torch.is_deterministic_algorithms_warn_only_enabled()),
        "threads": torch.get_num_threads(), "dtype": torch.get_default_dtype(),
        "matmul": torch.get_float32_matmul_precision(), "grad": torch.is_grad_enabled(),
        "safe globals": set(torch.serialization.get_safe_globals()),
        "environ": {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}, "cwd": os.getcwd(),
        "recursion": sys.getrecursionlimit(), "SIGUSR1": signal.getsignal(signal.SIGUSR1),
        "printoptions": np.get_printoptions(), "errstate": np.geterr(),
    }


class Trusted:
    pass


def test_restored_settings_puts_back_every_setting_the_body_changed(tmp_path, request):
    before = snapshot()
    with restored_settings():
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.set_num_threads(max(1, torch.get_num_threads() - 1) if torch.get_num_threads() > 1 else 2)
        torch.set_default_dtype(torch.float64)
        torch.set_float32_matmul_precision("medium" if before["matmul"] != "medium" else "high")
        torch.set_grad_enabled(False)
        torch.serialization.add_safe_globals([Trusted])
        os.environ["LAZYSTORE_ISOLATION_PROBE"] = "1"
        os.environ.pop("HOME", None)
        os.chdir(tmp_path)
        sys.setrecursionlimit(before["recursion"] + 100)
        signal.signal(signal.SIGUSR1, lambda *_: None)
        np.set_printoptions(precision=2)
        np.seterr(all="raise")
        changed = snapshot()
    assert {k for k in before if changed[k] == before[k]} == set()  # the body did change each one
    assert snapshot() == before


LEAKY_MODULE = """
import pytest, torch

@pytest.fixture(scope="module")
def fitted():
    torch.use_deterministic_algorithms(True)  # as a module fixture fitting a Lightning Trainer does

def test_fit(fitted):
    assert torch.are_deterministic_algorithms_enabled()

def test_after(tmp_path):
    assert not torch.are_deterministic_algorithms_enabled()
"""


@pytest.mark.slow
def test_what_a_module_fixture_changes_is_undone_after_the_test(tmp_path):
    """tests/conftest.py restores around each whole test, higher-scoped
    fixtures included (here in a pytest run of its own, with that conftest
    as its plugin)."""
    (tmp_path / "test_leaky.py").write_text(LEAKY_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "-p", "no:cacheprovider",
                          f"--basetemp={tmp_path / 'base'}", "test_leaky.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 passed" in run.stdout


def test_float4_tensors_save_again_after_a_deterministic_trainer(tmp_path):
    """The leak that made float4 tests fail after tests/training/test_lightning.py:
    Lightning's Trainer(deterministic=True) turns deterministic algorithms on
    for good, and with them on torch cannot copy a float4 tensor."""
    L = pytest.importorskip("lightning")
    packed = torch.arange(6, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).reshape(2, 3)
    with restored_settings():
        L.Trainer(deterministic=True, logger=False, enable_progress_bar=False, accelerator="cpu",
                  default_root_dir=tmp_path)
        assert torch.are_deterministic_algorithms_enabled()
        with pytest.raises(NotImplementedError, match="Float4"):
            packed[:, ::2].contiguous()
    save_file({"t": packed}, tmp_path / "t.lzy")
    with safe_open(tmp_path / "t.lzy", "pt") as f:
        got = f.get_slice("t")[:, ::2]
    assert torch.equal(got.contiguous().view(torch.uint8), packed[:, ::2].contiguous().view(torch.uint8))
