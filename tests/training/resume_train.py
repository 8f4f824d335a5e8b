"""A real (tiny) training run that checkpoints and resumes; driven by tests/training/test_resume.py.

    python resume_train.py full   --steps 2N --out full.lzy
    python resume_train.py first  --steps N  --ckdir ckpts [--every K]
    python resume_train.py resume --steps 2N --ckdir ckpts --out resumed.lzy [--skip-rng]

The model has dropout and batch norm, trained with AdamW and StepLR on data
drawn from seeded generators; every source of randomness is used each step
(torch's global RNG by dropout and the mini-batch order, a torch.Generator,
numpy's global RNG and a numpy Generator for the data, python's random for
augmentation), and its state is part of the checkpoint.
"""

from __future__ import annotations

import argparse
import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import lazystore as ls

STEPS_PER_EPOCH = 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        x = self.drop(F.relu(self.bn(self.conv(x))))
        return self.fc(x.flatten(1))


class Run:
    def __init__(self, seed: int):
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.model = Net()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.05)
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=2, gamma=0.5)
        self.data = np.random.default_rng(seed + 1)
        self.gen = torch.Generator().manual_seed(seed + 2)
        self.step, self.epoch = 0, 0
        self.best_loss = math.inf
        self.losses: list[float] = []

    def batch(self):
        x = self.data.standard_normal((16, 1, 8, 8), dtype=np.float32)
        y = self.data.integers(0, 3, 16)
        if random.random() < 0.5:  # augmentation: python's random
            x = x[..., ::-1]
        x = x + np.random.normal(0, 0.05, x.shape).astype(np.float32)  # numpy's global RNG
        order = torch.randperm(16, generator=self.gen)  # a torch.Generator
        return torch.from_numpy(np.ascontiguousarray(x))[order], torch.from_numpy(y)[order]

    def train_step(self):
        self.model.train()
        x, y = self.batch()
        loss = F.cross_entropy(self.model(x), y)  # dropout: torch's global RNG
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.step += 1
        self.losses.append(loss.item())
        self.best_loss = min(self.best_loss, loss.item())
        if self.step % STEPS_PER_EPOCH == 0:
            self.epoch += 1
            self.sched.step()

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "generator": self.gen.get_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
                "data": self.data.bit_generator.state,
            },
            "step": self.step,
            "epoch": self.epoch,
            "best_loss": self.best_loss,
            "losses": self.losses,
        }

    def load(self, state: dict, *, skip_rng: bool = False) -> None:
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        if not skip_rng:
            rng = state["rng"]
            torch.set_rng_state(rng["torch"])
            self.gen.set_state(rng["generator"])
            np.random.set_state(rng["numpy"])
            random.setstate(rng["python"])
            self.data.bit_generator.state = rng["data"]
        self.step, self.epoch = state["step"], state["epoch"]
        self.best_loss, self.losses = state["best_loss"], state["losses"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["full", "first", "resume"])
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--ckdir")
    p.add_argument("--out")
    p.add_argument("--every", type=int, default=2)
    p.add_argument("--skip-rng", action="store_true")
    args = p.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)

    if args.mode == "resume":
        run = Run(seed=12345)  # a different start: everything must come from the checkpoint
        mgr = ls.CheckpointManager(args.ckdir)
        run.load(mgr.restore(map_location="cpu"), skip_rng=args.skip_rng)
    else:
        run = Run(seed=0)
    mgr = ls.CheckpointManager(args.ckdir, keep_last=2, keep_best=1, metric="loss") if args.mode == "first" else None
    while run.step < args.steps:
        run.train_step()
        if mgr is not None and (run.step % args.every == 0 or run.step == args.steps):
            mgr.save(run.step, run.state(), metrics={"loss": run.losses[-1]})
    if args.out:
        ls.save(run.state(), args.out)


if __name__ == "__main__":
    main()
