"""lazystore.lightning.LazyStoreCheckpointIO with a real Lightning Trainer:
fit with ModelCheckpoint writing lazystore files (blocking, in the
background, and under Lightning's AsyncCheckpointIO), resume from a middle
checkpoint with ``ckpt_path=`` and end bit-identical to an uninterrupted run."""

from __future__ import annotations

import errno
import warnings

import numpy as np
import pytest
import torch

import lazystore as ls
from lazystore.testing.faults import SyscallFaults

L = pytest.importorskip("lightning")
from lightning.pytorch.callbacks import ModelCheckpoint  # imported after the skip
from lightning.pytorch.plugins.io import AsyncCheckpointIO  # imported after the skip

from lazystore.lightning import LazyStoreCheckpointIO  # imported after the skip

EPOCHS = 4


class Regressor(L.LightningModule):
    """A small model whose optimizer (SGD momentum) and LR schedule have state."""

    def __init__(self, lr: float = 0.05, seed: int = 0):
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_epoch=True, on_step=False)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.7)]


def data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(64, 1, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)  # no shuffle


def fit(root, plugin, *, seed=0, ckpt_path=None, **checkpointing):
    model = Regressor(seed=seed)
    callback = ModelCheckpoint(dirpath=root, filename="{epoch}", **(checkpointing or {"save_top_k": -1}))
    trainer = L.Trainer(max_epochs=EPOCHS, plugins=[plugin], callbacks=[callback], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, deterministic=True,
                        accelerator="cpu", default_root_dir=root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's advice on workers and logging
        trainer.fit(model, data(), ckpt_path=ckpt_path)
    return model, callback


PLUGINS = {
    "blocking": lambda: LazyStoreCheckpointIO(),
    "background": lambda: LazyStoreCheckpointIO(blocking=False, compression="zstd"),
    "AsyncCheckpointIO": lambda: AsyncCheckpointIO(LazyStoreCheckpointIO()),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(PLUGINS))
def test_fit_checkpoint_every_epoch_and_resume_bit_identical(tmp_path, kind):
    straight, _ = fit(tmp_path / "a", PLUGINS[kind]())
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == [f"epoch={e}.ckpt" for e in range(EPOCHS)]
    for name in files:  # lazystore files, complete
        with ls.open(tmp_path / "a" / name) as ck:
            assert ck.verify() == [] and "state_dict/net.0.weight" in ck

    # Resume from the middle, with another initialisation: the checkpoint decides.
    middle = tmp_path / "a" / "epoch=1.ckpt"
    resumed, _ = fit(tmp_path / "b", PLUGINS[kind](), seed=123, ckpt_path=middle)
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.equal(a, b), name
    ckpt = LazyStoreCheckpointIO().load_checkpoint(middle, weights_only=True)
    assert ckpt["epoch"] == 1 and ckpt["hyper_parameters"] == {"lr": 0.05, "seed": 0}
    assert isinstance(ckpt["optimizer_states"][0]["state"][0]["momentum_buffer"], torch.Tensor)


@pytest.mark.slow
def test_top_k_removes_older_checkpoints_in_the_background(tmp_path):
    _, callback = fit(tmp_path, LazyStoreCheckpointIO(blocking=False), save_top_k=1, monitor="train_loss")
    # Only the best is left: every other one was removed, none brought back by a save in flight.
    assert [str(p) for p in tmp_path.iterdir() if p.suffix == ".ckpt"] == [callback.best_model_path]
    assert ls.load(callback.best_model_path)["epoch"] == int(callback.best_model_path[-6])


def _checkpoint(value: float) -> dict:
    return {"state_dict": {"w": torch.full((256, 256), value)}, "epoch": int(value)}


def test_removing_the_checkpoint_being_written_waits_for_it(tmp_path):
    io = LazyStoreCheckpointIO(blocking=False)
    path = tmp_path / "sub" / "x.ckpt"
    io.save_checkpoint(_checkpoint(1.0), path)
    io.remove_checkpoint(path)  # the background save must not bring it back
    io.teardown()
    assert not path.exists()


def test_the_state_may_change_as_soon_as_save_checkpoint_returns(tmp_path):
    io = LazyStoreCheckpointIO(blocking=False)
    ckpt = _checkpoint(1.0)
    io.save_checkpoint(ckpt, tmp_path / "x.ckpt")
    ckpt["state_dict"]["w"].fill_(2.0)
    ckpt["epoch"] = 2
    io.teardown()
    loaded = io.load_checkpoint(tmp_path / "x.ckpt", map_location=lambda storage, loc: storage)
    assert torch.equal(loaded["state_dict"]["w"], torch.full((256, 256), 1.0)) and loaded["epoch"] == 1


def test_a_failed_background_save_is_raised_at_teardown(tmp_path):
    io = LazyStoreCheckpointIO(blocking=False)
    with SyscallFaults(fail_at=1, errno=errno.ENOSPC, calls=("write",)):
        io.save_checkpoint(_checkpoint(1.0), tmp_path / "x.ckpt")
        with pytest.raises(OSError, match="injected"):
            io.teardown()
    assert list(tmp_path.iterdir()) == []
    io.save_checkpoint(_checkpoint(3.0), tmp_path / "x.ckpt")  # still usable
    io.teardown()
    assert float(io.load_checkpoint(tmp_path / "x.ckpt")["state_dict"]["w"][0, 0]) == 3.0


def test_object_store_urls_with_storage_options(tmp_path):
    io = LazyStoreCheckpointIO(compression="zstd")
    url = "memory://lazystore-lightning-test/run/x.ckpt"
    io.save_checkpoint(_checkpoint(4.0), url, storage_options={})
    assert np.array_equal(io.load_checkpoint(url)["state_dict"]["w"].numpy(), np.full((256, 256), 4.0, np.float32))
    io.remove_checkpoint(url)
    with pytest.raises(FileNotFoundError):
        io.load_checkpoint(url)


def test_unstorable_hyper_parameters_are_refused_up_front(tmp_path):
    io = LazyStoreCheckpointIO(blocking=False)
    with pytest.raises(ls.InvalidInputError, match="hyper_parameters/names"):  # a set: not stored
        io.save_checkpoint({"hyper_parameters": {"names": {"a"}}}, tmp_path / "x.ckpt")
    io.teardown()
    assert list(tmp_path.iterdir()) == []
