"""LazyStoreCheckpointIO resumes from a project's torch ``.ckpt`` files
(Lightning's default format) without unpickling them: the format is told by
content, the file is read as ``torch.load(weights_only=True)`` reads it
(paths and namespaces allowed), and anything else pickled in it is refused
with a lazystore error that says what to do."""

from __future__ import annotations

import os
from argparse import Namespace
from pathlib import Path

import pytest
import torch

import lazystore as ls

pytest.importorskip("lightning")
from lightning.pytorch.callbacks import ModelCheckpoint

from lazystore.lightning import LazyStoreCheckpointIO  # after the skip
from tests.training.lightning_modules import Tiny, TinyData, namespace, quietly, trainer

EPOCHS = 3


def fit(root, plugins=(), ckpt_path=None):
    model, data = Tiny(cfg=namespace()), TinyData()
    torch.nn.init.normal_(model.net.weight)  # another start: the checkpoint decides
    every_epoch = ModelCheckpoint(dirpath=root, filename="{epoch}", save_top_k=-1)
    t = trainer(root, plugins, max_epochs=EPOCHS, callbacks=[every_epoch])
    quietly(t.fit, model, datamodule=data, ckpt_path=ckpt_path)
    return model, data, t


@pytest.mark.slow
def test_switching_to_the_plugin_mid_run_resumes_from_torch_checkpoints(tmp_path):
    straight, _, _ = fit(tmp_path / "torch")  # Lightning's own torch.save checkpoints
    middle = tmp_path / "torch" / "epoch=0.ckpt"
    assert middle.read_bytes()[:4] == b"PK\x03\x04"
    resumed, data, t = fit(tmp_path / "lazy", [LazyStoreCheckpointIO()], ckpt_path=middle)
    assert t.global_step == EPOCHS * 4  # 8 samples in batches of 2 per epoch
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    assert data.seen == 7  # the datamodule's state came from the torch file
    # The run goes on in lazystore files, paths and namespaces included.
    later = tmp_path / "lazy" / f"epoch={EPOCHS - 1}.ckpt"
    with ls.open(later) as ck:
        assert ck.verify() == []
    hp = LazyStoreCheckpointIO().load_checkpoint(later)["hyper_parameters"]
    assert hp["cfg"] == namespace() and isinstance(hp["data_dir"], Path)


def _torch_checkpoint(path, hyper_parameters):
    torch.save({"state_dict": {"net.weight": torch.ones(1, 4), "net.bias": torch.zeros(1)}, "epoch": 3,
                "global_step": 12, "pytorch-lightning_version": "2.6.6", "hparams_name": "kwargs",
                "hyper_parameters": hyper_parameters, "optimizer_states": [{"state": {}, "param_groups": []}]},
               path)


def test_the_format_is_told_by_content_not_the_extension(tmp_path):
    io = LazyStoreCheckpointIO()
    _torch_checkpoint(tmp_path / "torch.lzy", {"lr": 0.5, "data_dir": Path("d"), "cfg": Namespace(a=1)})
    io.save_checkpoint({"epoch": 4, "hyper_parameters": {"lr": 0.5}}, tmp_path / "lazy.pt.ckpt")
    os.replace(tmp_path / "lazy.pt.ckpt", tmp_path / "lazy.pt")
    from_torch = io.load_checkpoint(tmp_path / "torch.lzy", weights_only=True)
    assert from_torch["hyper_parameters"] == {"lr": 0.5, "data_dir": Path("d"), "cfg": Namespace(a=1)}
    assert torch.equal(from_torch["state_dict"]["net.weight"], torch.ones(1, 4))
    assert io.load_checkpoint(tmp_path / "lazy.pt")["epoch"] == 4


def test_map_location_of_a_torch_file_is_torch_loads(tmp_path):
    _torch_checkpoint(tmp_path / "t.ckpt", {"lr": 0.5})
    loaded = LazyStoreCheckpointIO().load_checkpoint(tmp_path / "t.ckpt", map_location="meta")
    assert loaded["state_dict"]["net.weight"].is_meta


# Set when the pickle below runs: it must never be.
UNPICKLED = []


def _record_unpickling(text):
    UNPICKLED.append(text)
    return text


class Config:
    """A config object, as projects put in hyper-parameters; unpickling it
    here would run ``_record_unpickling`` (a stand-in for any code)."""

    def __reduce__(self):
        return (_record_unpickling, ("ran",))


@pytest.mark.parametrize("weights_only", [None, True, False])
def test_an_arbitrary_pickled_object_is_refused_never_unpickled(tmp_path, weights_only):
    path = tmp_path / "epoch=3.ckpt"
    _torch_checkpoint(path, {"lr": 0.5, "cfg": Config()})
    with pytest.raises(ls.FormatError) as exc:
        LazyStoreCheckpointIO().load_checkpoint(path, weights_only=weights_only)
    message = str(exc.value)
    assert str(path) in message and "_record_unpickling" in message  # the file, and what it holds
    assert "weights_only=True" in message and "save_checkpoint" in message  # why, and what to do
    assert "\x1b" not in message
    assert UNPICKLED == []


def test_a_resume_from_such_a_file_fails_before_training(tmp_path):
    path = tmp_path / "epoch=3.ckpt"
    _torch_checkpoint(path, {"lr": 0.5, "cfg": Config()})
    model = Tiny()
    with pytest.raises(ls.FormatError, match="_record_unpickling"):
        quietly(trainer(tmp_path, [LazyStoreCheckpointIO()]).fit, model, datamodule=TinyData(), ckpt_path=path)
    assert model.steps_run == 0 and UNPICKLED == []


def test_the_users_own_safe_globals_survive_a_load(tmp_path):
    # lazystore allows paths for the length of its own load only, and must not
    # take away what the user allowed for theirs.
    _torch_checkpoint(tmp_path / "t.ckpt", {"p": Path("x")})
    cls, before = type(Path()), torch.serialization.get_safe_globals()
    assert cls not in before
    with torch.serialization.safe_globals([cls]):
        LazyStoreCheckpointIO().load_checkpoint(tmp_path / "t.ckpt")
        assert cls in torch.serialization.get_safe_globals()
    LazyStoreCheckpointIO().load_checkpoint(tmp_path / "t.ckpt")
    assert set(torch.serialization.get_safe_globals()) == set(before)
