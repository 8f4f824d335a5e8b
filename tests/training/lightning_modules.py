"""Tiny Lightning modules and Trainer runs shared by the Lightning tests.

Everything runs on the CPU in a few steps: a Linear layer, an SGD optimizer
with momentum (so the optimizer has state), eight samples in batches of two.
"""

from __future__ import annotations

import warnings
from argparse import Namespace
from pathlib import Path, PurePosixPath

import pytest
import torch

L = pytest.importorskip("lightning")

EXTRA_PATHS = (PurePosixPath("a/b"),)
TRAINER_QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False,
                 "accelerator": "cpu", "deterministic": True}


class Tiny(L.LightningModule):
    """A module whose hyper-parameters hold the objects Lightning projects
    keep there: a path, a namespace (holding a path), a pure path in a list."""

    def __init__(self, width: int = 4, lr: float = 0.1, data_dir: Path = Path("data"),
                 cfg: Namespace | None = None, extra_paths=EXTRA_PATHS):
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = torch.nn.Linear(width, 1)
        self.steps_run = 0
        self.loaded_checkpoint_keys = None

    def training_step(self, batch, _):
        self.steps_run += 1
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["note"] = {"saved_by": "Tiny", "where": Path("notes") / "n.txt"}

    def on_load_checkpoint(self, checkpoint):
        self.loaded_checkpoint_keys = sorted(checkpoint)


def namespace() -> Namespace:
    return Namespace(depth=2, name="tiny", out=Path("runs") / "x", nested=Namespace(k=[1, 2]))


class TinyData(L.LightningDataModule):
    """A datamodule with hyper-parameters and state of its own."""

    def __init__(self, batch_size: int = 2, root: Path = Path("data")):
        super().__init__()
        self.save_hyperparameters()
        self.seen = 0

    def train_dataloader(self):
        return loader(self.hparams.batch_size)

    def val_dataloader(self):
        return loader(self.hparams.batch_size)

    def state_dict(self):
        return {"seen": self.seen + 7}

    def load_state_dict(self, state):
        self.seen = state["seen"]


def loader(batch_size: int = 2, width: int = 4):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, width, generator=g)
    y = x.sum(dim=1, keepdim=True)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=batch_size)


def trainer(root, plugins=(), **options):
    return L.Trainer(plugins=list(plugins), default_root_dir=root, **{"max_epochs": 1, **TRAINER_QUIET, **options})


def quietly(call, *args, **kwargs):
    """``call(*args, **kwargs)`` without Lightning's advice on workers and logging."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call(*args, **kwargs)
