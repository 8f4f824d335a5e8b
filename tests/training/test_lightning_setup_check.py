"""What LazyStoreCheckpointIO cannot save is refused when the Trainer sets
up ``fit``, before the first step, not at the first save after an epoch.

Lightning gives a CheckpointIO no setup hook; lazystore registers a
callback through Lightning's ``lightning.pytorch.callbacks_factory`` entry
point (pyproject.toml), which every Trainer loads with no user code. Where
lazystore is not installed with that entry point (a bare checkout on
PYTHONPATH), the ``registered`` fixture adds the same entry point for the
test, from a throwaway distribution on sys.path.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch

import lazystore as ls
from tests.paths import REPO

pytest.importorskip("lightning")
from lightning.pytorch.plugins.io import AsyncCheckpointIO

from lazystore.lightning import LazyStoreCheckpointIO  # after the skip
from tests.training.lightning_modules import Tiny, TinyData, loader, namespace, quietly, trainer

GROUP = "lightning.pytorch.callbacks_factory"
FACTORY = "lazystore.lightning.setup_check:callbacks"


def test_pyproject_registers_the_factory():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"][GROUP] == {"lazystore": FACTORY}


@pytest.fixture
def registered(tmp_path, monkeypatch):
    if not any(ep.value == FACTORY for ep in entry_points(group=GROUP)):
        dist = tmp_path / "site" / "lazystore_setup_check_test-0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lazystore-setup-check-test\nVersion: 0\n")
        (dist / "entry_points.txt").write_text(f"[{GROUP}]\nlazystore = {FACTORY}\n")
        monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert [ep.value for ep in entry_points(group=GROUP)].count(FACTORY) == 1


class Opaque:
    """A config object lazystore does not store."""


PLUGINS = {
    "plain": lambda: LazyStoreCheckpointIO(),
    "background": lambda: LazyStoreCheckpointIO(blocking=False),
    "AsyncCheckpointIO": lambda: AsyncCheckpointIO(LazyStoreCheckpointIO()),
}


@pytest.mark.parametrize("kind", list(PLUGINS))
def test_an_unsaveable_hyper_parameter_is_refused_before_the_first_step(tmp_path, registered, kind):
    model = Tiny(cfg=Opaque())
    t = trainer(tmp_path, [PLUGINS[kind]()])
    with pytest.raises(ls.InvalidInputError) as exc:
        quietly(t.fit, model, datamodule=TinyData())
    message = str(exc.value)
    assert "hyper_parameters/cfg" in message and "Opaque" in message  # which one, and its type
    assert "Tiny" in message and "ignore=" in message  # whose, and what to do
    assert model.steps_run == 0 and not list(tmp_path.rglob("*.ckpt"))


def test_a_datamodules_hyper_parameters_are_checked_too(tmp_path, registered):
    model = Tiny(cfg=namespace())
    expected = r"TinyData's hyper-parameter 'root' \(a set\).*datamodule_hyper_parameters/root"
    with pytest.raises(ls.InvalidInputError, match=expected):
        quietly(trainer(tmp_path, [LazyStoreCheckpointIO()]).fit, model, datamodule=TinyData(root={"a"}))
    assert model.steps_run == 0


@pytest.mark.slow
def test_saveable_ones_pass_and_other_plugins_are_left_alone(tmp_path, registered):
    model = Tiny(cfg=namespace())  # paths and namespaces: saved since issue 26
    quietly(trainer(tmp_path / "a", [LazyStoreCheckpointIO()], max_steps=1).fit, model, datamodule=TinyData())
    assert model.steps_run == 1
    other = Tiny(cfg=Opaque())  # torch.save pickles anything; not lazystore's business
    quietly(trainer(tmp_path / "b", max_steps=1).fit, other, datamodule=TinyData())
    assert other.steps_run == 1


def test_evaluation_is_not_refused(tmp_path, registered):
    # Only fit saves checkpoints; validating a module lazystore could not save is fine.
    model = Tiny(cfg=Opaque())
    torch.nn.init.zeros_(model.net.weight)
    assert quietly(trainer(tmp_path, [LazyStoreCheckpointIO()]).validate, model, loader())


def test_without_the_entry_point_the_save_still_refuses(tmp_path):
    # The last line of defence (a bare checkout): ls.save validates before writing.
    io = LazyStoreCheckpointIO()
    with pytest.raises(ls.InvalidInputError, match="hyper_parameters/cfg"):
        io.save_checkpoint({"hyper_parameters": {"cfg": Opaque()}}, tmp_path / "x.ckpt")
    assert not Path(tmp_path / "x.ckpt").exists()
