"""lazystore.lightning.load_from_checkpoint, and hyper-parameters that are
paths and namespaces, with real Trainer runs: the plugin's checkpoint loads
as ``LightningModule.load_from_checkpoint`` loads torch's (hyper-parameters,
kwargs overriding them, ``map_location``, ``strict``, ``hparams_file``, the
``on_load_checkpoint`` hook, LightningDataModule), and what went in as a
``Path`` or an ``argparse.Namespace`` comes back as one."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
import torch

import lazystore as ls

pytest.importorskip("lightning")
from lazystore.lightning import LazyStoreCheckpointIO, load_from_checkpoint  # after the skip
from tests.training.lightning_modules import Tiny, TinyData, loader, namespace, quietly, trainer


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One short fit, saved by the plugin (``.ckpt``) and by Lightning's own
    torch IO (``torch.ckpt``): the same model, datamodule and Trainer state."""
    root = tmp_path_factory.mktemp("fit")
    model, data = Tiny(cfg=namespace()), TinyData(batch_size=4)
    t = trainer(root, [LazyStoreCheckpointIO()])
    quietly(t.fit, model, datamodule=data)
    t.save_checkpoint(root / "lazy.ckpt")
    plain = trainer(root)
    quietly(plain.fit, Tiny(cfg=namespace()), datamodule=TinyData(batch_size=4))
    plain.save_checkpoint(root / "torch.ckpt")
    return root, model


@pytest.mark.slow
def test_lightnings_own_load_from_checkpoint_cannot_read_the_plugins_file(saved):
    # The row of issue 26 this module answers: torch.load meets a lazystore file.
    root, _ = saved
    with pytest.raises(Exception, match="(?i)weights only load failed|invalid load key|zip"):
        Tiny.load_from_checkpoint(root / "lazy.ckpt")


def test_load_from_checkpoint_restores_weights_and_hyper_parameters(saved):
    root, trained = saved
    model = quietly(load_from_checkpoint, Tiny, root / "lazy.ckpt")
    assert type(model) is Tiny
    for (name, a), (_, b) in zip(trained.state_dict().items(), model.state_dict().items()):
        assert torch.equal(a, b), name
    assert model.hparams == trained.hparams
    # Paths and namespaces come back as themselves, nested ones too.
    assert type(model.hparams.data_dir) is type(Path("data")) and model.hparams.data_dir == Path("data")
    assert model.hparams.cfg == namespace() and type(model.hparams.cfg.nested) is Namespace
    assert type(model.hparams.extra_paths) is tuple and type(model.hparams.extra_paths[0]) is PurePosixPath
    # The hook saw the checkpoint, with the module's own addition, but not the plugin's record.
    assert "note" in model.loaded_checkpoint_keys and "state_dict" in model.loaded_checkpoint_keys
    assert not any(k.startswith("__lazystore") for k in model.loaded_checkpoint_keys)


@pytest.mark.slow
def test_it_matches_lightnings_load_of_the_same_state_saved_by_torch(saved):
    # Lightning's own function on its own torch file (trusted: it is ours) is
    # the reference; lazystore's on the plugin's file must agree with it.
    root, _ = saved
    ours = quietly(load_from_checkpoint, Tiny, root / "lazy.ckpt", lr=0.5, width=4)
    theirs = quietly(Tiny.load_from_checkpoint, root / "torch.ckpt", weights_only=False, lr=0.5, width=4)
    assert ours.hparams == theirs.hparams and ours.hparams.lr == 0.5
    assert ours.loaded_checkpoint_keys == theirs.loaded_checkpoint_keys
    for (name, a), (_, b) in zip(theirs.state_dict().items(), ours.state_dict().items()):
        assert torch.equal(a, b), name
    # And lazystore reads Lightning's torch file too, never unpickling (see test_lightning_torch_files.py).
    safe = quietly(load_from_checkpoint, Tiny, root / "torch.ckpt", lr=0.5)
    assert safe.hparams == theirs.hparams


def test_kwargs_override_saved_hyper_parameters_and_reach_init(saved):
    root, _ = saved
    model = quietly(load_from_checkpoint, Tiny, root / "lazy.ckpt", lr=0.25, unknown=1)
    assert model.hparams.lr == 0.25 and "unknown" not in model.hparams  # filtered by __init__'s signature
    assert model.configure_optimizers().param_groups[0]["lr"] == 0.25


def test_hparams_file_replaces_the_saved_hyper_parameters(saved, tmp_path):
    root, _ = saved
    (tmp_path / "h.yaml").write_text("lr: 0.75\nwidth: 4\n")
    model = quietly(load_from_checkpoint, Tiny, root / "lazy.ckpt", hparams_file=tmp_path / "h.yaml")
    assert model.hparams.lr == 0.75 and model.hparams.data_dir == Path("data")  # data_dir: __init__'s default
    with pytest.raises(ValueError, match="yaml"):
        load_from_checkpoint(Tiny, root / "lazy.ckpt", hparams_file=tmp_path / "h.txt")


class Wider(Tiny):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.head = torch.nn.Linear(1, 1)


class Lenient(Tiny):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.strict_loading = False


def test_strict(saved):
    root, _ = saved
    with pytest.raises(RuntimeError, match="Missing key"):
        quietly(load_from_checkpoint, Wider, root / "lazy.ckpt")
    with pytest.warns(UserWarning, match="head.weight"):
        model = load_from_checkpoint(Wider, root / "lazy.ckpt", strict=False)
    assert torch.equal(model.net.weight, saved[1].net.weight)
    # Lightning's rule: strict= must agree with the module's strict_loading.
    with pytest.raises(ValueError, match="strict_loading"):
        quietly(load_from_checkpoint, Lenient, root / "lazy.ckpt", strict=True)


@pytest.mark.parametrize("map_location", [None, "cpu", torch.device("cpu"), {"cuda:0": "cpu"},
                                          lambda storage, loc: storage])
def test_map_location(saved, map_location):
    model = quietly(load_from_checkpoint, Tiny, saved[0] / "lazy.ckpt", map_location=map_location)
    assert model.net.weight.device == torch.device("cpu")


@pytest.mark.slow
def test_a_datamodule_loads_its_hyper_parameters_and_state(saved):
    data = quietly(load_from_checkpoint, TinyData, saved[0] / "lazy.ckpt")
    assert type(data) is TinyData and data.hparams.batch_size == 4 and data.hparams.root == Path("data")
    assert data.seen == 7
    ref = quietly(TinyData.load_from_checkpoint, saved[0] / "torch.ckpt", weights_only=False)
    assert data.hparams == ref.hparams and data.seen == ref.seen


def test_not_a_lightning_class_is_refused_before_reading(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="LightningModule or LightningDataModule"):
        load_from_checkpoint(torch.nn.Linear, tmp_path / "missing.ckpt")


@pytest.mark.slow
def test_validate_and_test_with_ckpt_path_read_the_plugins_file(saved, tmp_path):
    root, trained = saved
    io = LazyStoreCheckpointIO()
    model = Tiny(cfg=namespace())
    torch.nn.init.zeros_(model.net.weight)
    t = trainer(tmp_path, [io])
    result = quietly(t.validate, model, loader(), ckpt_path=root / "lazy.ckpt")
    assert torch.equal(model.net.weight, trained.net.weight)  # the checkpoint's weights were loaded
    reference = quietly(trainer(tmp_path).validate, trained, loader())
    assert result == reference


# -- paths and namespaces, through the plugin alone --------------------------------


def test_paths_and_namespaces_come_back_as_themselves(tmp_path):
    io = LazyStoreCheckpointIO()
    state = {
        "hyper_parameters": {"root": Path("/data/x"), "win": PureWindowsPath(r"C:\data"), "cfg": namespace(),
                             "many": [Path("a"), (PurePosixPath("b"), Namespace())]},
        "state_dict": {"w": torch.ones(2)},
    }
    io.save_checkpoint(state, tmp_path / "x.ckpt")
    loaded = io.load_checkpoint(tmp_path / "x.ckpt")
    assert loaded["hyper_parameters"] == state["hyper_parameters"]
    assert torch.equal(loaded["state_dict"]["w"], torch.ones(2))
    hp = loaded["hyper_parameters"]
    assert type(hp["win"]) is PureWindowsPath and type(hp["many"][1][0]) is PurePosixPath
    assert type(hp["cfg"].nested) is Namespace and type(hp["many"][1]) is tuple
    # The file holds plain values and a small record of what to rebuild (docs/training.md).
    raw = ls.load(tmp_path / "x.ckpt")
    assert raw["hyper_parameters"]["root"] == "/data/x" and raw["hyper_parameters"]["cfg"]["depth"] == 2
    assert raw["__lazystore_lightning__"]["version"] == 1
    # The caller's checkpoint is not changed by the save.
    assert type(state["hyper_parameters"]["cfg"]) is Namespace and "__lazystore_lightning__" not in state


def test_a_checkpoint_without_paths_or_namespaces_gets_no_record(tmp_path):
    io = LazyStoreCheckpointIO()
    io.save_checkpoint({"hyper_parameters": {"lr": 0.1}, "epoch": 0}, tmp_path / "x.ckpt")
    assert ls.load(tmp_path / "x.ckpt") == {"hyper_parameters": {"lr": 0.1}, "epoch": 0}


@pytest.mark.parametrize("record", [
    {"version": 2, "objects": []},
    {"version": 1, "objects": [[["hyper_parameters", "nope"], "Path"]]},
    {"version": 1, "objects": [[["hyper_parameters", "lr"], "Path"]]},  # not a string
    {"version": 1, "objects": [[["hyper_parameters", "cfg"], "os.system"]]},
    {"version": 1, "objects": [[["hyper_parameters"], "Namespace"], [["hyper_parameters", "cfg"], "Path"]]},
    {"version": 1, "objects": "all"},
])
def test_a_bad_record_is_a_format_error_naming_the_file(tmp_path, record):
    path = tmp_path / "x.ckpt"
    ls.save({"hyper_parameters": {"lr": 0.1, "cfg": "c"}, "__lazystore_lightning__": record}, path)
    with pytest.raises(ls.FormatError, match="x.ckpt"):
        LazyStoreCheckpointIO().load_checkpoint(path)


def test_the_record_key_is_reserved(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="__lazystore_lightning__"):
        LazyStoreCheckpointIO().save_checkpoint({"__lazystore_lightning__": 1, "p": Path("x")}, tmp_path / "x.ckpt")
    assert list(tmp_path.iterdir()) == []


def test_subclasses_are_refused_not_flattened(tmp_path):
    class MyPath(type(Path())):
        pass

    class MyNamespace(Namespace):
        pass

    for value in (MyPath("x"), MyNamespace(a=1)):
        with pytest.raises(ls.InvalidInputError, match="hyper_parameters/v"):
            LazyStoreCheckpointIO().save_checkpoint({"hyper_parameters": {"v": value}}, tmp_path / "x.ckpt")



# -- what load_from_checkpoint takes from Lightning's private _load_state ----------


def test_lightnings_load_state_is_what_we_rely_on():
    # lazystore.lightning.loading hands the checkpoint to this private
    # function; a Lightning that changes it must fail here first.
    import inspect

    from lightning.pytorch.core.saving import _load_state

    assert list(inspect.signature(_load_state).parameters) == ["cls", "checkpoint", "strict", "cls_kwargs_new"]


def test_an_untrusted_instantiator_in_the_file_is_blocked(tmp_path):
    # Lightning's allowlist of instantiators (CVE fix #21822) applies to
    # lazystore files too, because its _load_state does the instantiating.
    path = tmp_path / "x.ckpt"
    LazyStoreCheckpointIO().save_checkpoint({"state_dict": {}, "pytorch-lightning_version": "2.6.6",
                                             "hyper_parameters": {"_instantiator": "os.system"}}, path)
    with pytest.raises(ValueError, match="allowlist"):
        load_from_checkpoint(Tiny, path)
