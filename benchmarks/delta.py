"""Delta checkpoints (issue 17): series size, a frozen base, save and restore time.

All on a real fine-tune (benchmarks/finetune.py: transformers' BertModel of
all-MiniLM-L6-v2 with its trained weights, AdamW, lr 2e-5, on the CPU):

- ``series``: a series of 8 checkpoints, one every 1, 10 and 100 steps
  (quick mode: 4 checkpoints, every step), stored by ``CheckpointManager(delta=True)``
  with zstd, over the same series stored standalone with zstd. The target
  rows are the model's weights, as the issue measured them (a ~75 MB
  checkpoint); the rows with the AdamW moments too are informational, as
  are the alternatives: the manager with ``delta_depth=1`` (a star around
  each keyframe), every delta against the previous checkpoint (a chain)
  and against the first (one keyframe).
- ``frozen``: ten checkpoints of a model whose 16 MiB base (real trained
  weights) is frozen while its LoRA adapters train, over one checkpoint.
- ``timing``: in the 10-step series stored by the manager, its deepest
  checkpoint (the most files a restore reads): saving it as a delta
  against its base over a standalone compressed save of the same state,
  and restoring it over restoring the standalone file. The full run also
  restores the deepest checkpoint of the same series stored one delta deep
  (``delta_depth=1``), informational: the restore time that depth buys.

``python -m benchmarks.delta [--quick]`` runs these alone and prints the rows.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from . import finetune
from .measures import Context, Result, Target
from .timing import compare

# Checkpoints per series; the quick (smoke) run stores fewer, as each costs
# a fine-tune step and five ways of storing it.
SERIES = {"full": 8, "quick": 4}
INTERVALS = {"full": (1, 10, 100), "quick": (1,)}
FROZEN_BYTES = 16 << 20


def _steps(interval: int, mode: str) -> list[int]:
    return [interval * i for i in range(1, SERIES[mode] + 1)]


def _checkpoints(ctx: Context, interval: int) -> list[Path]:
    """The fine-tune's checkpoints of the series every ``interval`` steps. A
    quick (smoke) run trains its few steps into its own temporary folder,
    deleted with it; a full run's 800 steps take minutes, kept in the user's
    cache (finetune.cache_dir(), outside the checkout) for the next run."""
    quick = ctx.scale.mode == "quick"
    folder = ctx.files.scratch("finetune") if quick else finetune.cache_dir()
    return finetune.checkpoints(_steps(interval, ctx.scale.mode), folder)


def _state(path: Path, model_only: bool):
    import lazystore as ls

    state = ls.load(path)
    return {"model": state["model"]} if model_only else state


def _store(folder: Path, paths: list[Path], model_only: bool, how: str) -> list[int]:
    """Bytes of the series stored ``how``: "standalone", "delta" (the
    manager's policy), "star" (the manager's, one delta deep), "chain"
    (each against the previous) or "first" (each against the first)."""
    mgr = _series(folder, paths, model_only, how)
    sizes = [mgr.path(i).stat().st_size for i in range(len(paths))]
    shutil.rmtree(folder)
    return sizes


def _series(folder: Path, paths: list[Path], model_only: bool, how: str):
    """The manager of ``folder`` after storing the series there ``how`` (see :func:`_store`)."""
    import lazystore as ls

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    star = {"delta_depth": 1} if how == "star" else {}
    mgr = ls.CheckpointManager(folder, compression="zstd", delta=how in ("delta", "star"), **star)
    for i, path in enumerate(paths):
        state = _state(path, model_only)
        if how in ("standalone", "delta", "star") or i == 0:
            mgr.save(i, state)
        else:
            base = mgr.path(i - 1 if how == "chain" else 0)
            ls.save(state, mgr.path(i), compression="zstd", base=base)
    return mgr


def series(ctx: Context) -> list[Result]:
    root = ctx.files.scratch("delta-series")
    rows = []
    for interval in INTERVALS[ctx.scale.mode]:
        paths = _checkpoints(ctx, interval)
        for model_only, what in ((True, "model"), (False, "model+AdamW")):
            alones = _store(root / "alone", paths, model_only, "standalone")
            alone = sum(alones)
            hows = ("delta", "star", "chain", "first") if model_only else ("delta",)
            for how in hows:
                sizes = _store(root / how, paths, model_only, how)
                size = sum(sizes)
                each = " ".join(f"{a / b:.2f}" for a, b in zip(sizes, alones))
                target = Target("<=", 0.6, "ratio") if (how == "delta" and model_only) else None
                label = {"delta": "CheckpointManager(delta=True)", "star": "delta_depth=1 (a star)",
                         "chain": "each against the previous", "first": "each against the first"}[how]
                suffix = ("" if model_only else "_adamw") + ("" if how == "delta" else f"_{how}")
                name = f"delta_series_{interval}{suffix}"
                rows.append(Result(name, f"{len(paths)} checkpoints every {interval} steps, {what}: {label}, zstd",
                                   size / 2**20, alone / 2**20, "MiB", size / alone, target, "size",
                                   anchor_label="standalone zstd", note=f"each checkpoint: {each}",
                                   group="delta"))
    return rows


def _frozen_model():
    """A frozen 16 MiB base (the first trained tensors of all-MiniLM-L6-v2)
    and LoRA adapters (rank 8) on its square projections."""
    from safetensors.numpy import load_file

    weights = load_file(finetune.package_dir() / "model.safetensors")
    base, total = {}, 0
    for name, w in weights.items():
        if total + w.nbytes > FROZEN_BYTES:
            continue
        base[name] = w
        total += w.nbytes
    rng = np.random.default_rng(0)
    square = [n for n, w in base.items() if w.ndim == 2 and w.shape[0] == w.shape[1]]
    adapters = {f"{n}.lora_A": rng.standard_normal((8, base[n].shape[1])).astype(np.float32) * 0.01 for n in square}
    adapters |= {f"{n}.lora_B": np.zeros((base[n].shape[0], 8), np.float32) for n in square}
    return base, adapters, total


def frozen(ctx: Context) -> list[Result]:
    import lazystore as ls

    base, adapters, total = _frozen_model()
    folder = ctx.files.scratch("delta-frozen")
    mgr = ls.CheckpointManager(folder, compression="zstd", delta=True)
    rng = np.random.default_rng(1)
    for step in range(10):
        for a in adapters.values():  # a training step: every adapter value moves
            a += rng.standard_normal(a.shape).astype(np.float32) * 1e-3
        mgr.save(step, {"base": base, "adapters": adapters})
    sizes = [os.path.getsize(mgr.path(s)) for s in mgr.steps()]
    shutil.rmtree(folder)
    adapter_bytes = sum(a.nbytes for a in adapters.values())
    return [Result("delta_frozen", f"10 checkpoints, frozen {total / 2**20:.0f} MiB base + "
                   f"{adapter_bytes / 2**10:.0f} KiB of LoRA adapters, delta=True, over one checkpoint",
                   sum(sizes) / 2**20, sizes[0] / 2**20, "MiB", sum(sizes) / sizes[0], Target("<=", 1.6, "ratio"),
                   "size", anchor_label="one checkpoint",
                   note=f"one checkpoint {sizes[0] / 2**20:.1f} MiB, the nine others {sum(sizes[1:]) / 2**20:.2f} MiB",
                   group="delta")]


def timing(ctx: Context) -> list[Result]:
    import lazystore as ls

    interval = 10 if ctx.scale.mode == "full" else 1
    paths = _checkpoints(ctx, interval)
    folder = ctx.files.scratch("delta-timing")
    mgr = _series(folder / "series", paths, True, "delta")
    # The deepest checkpoint the policy made (the latest of the deepest): its restore reads the most files.
    step, depth = _deepest(mgr)
    base = mgr.directory / mgr._base_name(step)
    state = _state(paths[step], True)
    delta, alone = mgr.directory / "delta.lzy", folder / "alone.lzy"  # a delta beside its base
    saves = compare({
        "delta save": lambda: ls.save(state, delta, compression="zstd", base=base),
        "standalone save": lambda: ls.save(state, alone, compression="zstd"),
    }, reps=ctx.scale.reps)
    restores = {"delta restore": lambda: ls.load(mgr.path(step)), "standalone restore": lambda: ls.load(alone)}
    if ctx.scale.mode == "full":
        # The same series one delta deep (delta_depth=1), for the trade-off between size and restore time.
        star = _series(folder / "star", paths, True, "star")
        star_step, star_depth = _deepest(star)
        restores["star restore"] = lambda: ls.load(star.path(star_step))
    loads = compare(restores, reps=ctx.scale.reps)
    shutil.rmtree(folder)
    measured = [("delta_save", saves, "delta save", "standalone save", 2.0, depth, step),
                ("delta_restore", loads, "delta restore", "standalone restore", 3.0, depth, step)]
    if "star restore" in loads:
        measured.append(("delta_restore_star", loads, "star restore", "standalone restore", None, star_depth,
                         star_step))
    rows = []
    for name, timings, ours, anchor, limit, deep, at in measured:
        t, a = timings[ours], timings[anchor]
        spread = (f"{ours} {min(t.samples):.2f}-{max(t.samples):.2f} s, "
                  f"{anchor} {min(a.samples):.2f}-{max(a.samples):.2f} s")
        policy = "delta_depth=1" if name == "delta_restore_star" else "delta=True"
        rows.append(Result(name, f"{ours} of the fine-tune's model ({policy}, every {interval} steps, checkpoint "
                           f"{at + 1} of {len(paths)}, {deep} deltas deep: the deepest)",
                           t.median, a.median, "s", t.median / a.median,
                           Target("<=", limit, "ratio") if limit else None, "time",
                           subject=ours, anchor_label=anchor, samples={ours: list(t.samples), anchor: list(a.samples)},
                           note=spread, group="delta"))
    return rows


def _deepest(mgr) -> tuple[int, int]:
    """The latest of the checkpoints that are the most deltas deep, and its depth."""
    from lazystore.training.chains import Series

    series = Series(mgr, mgr.steps())  # one listing of the folder for every step's depth
    depth, step = max((series.depth(s), s) for s in mgr.steps())
    return step, depth


MEASURES = (series, frozen, timing)


if __name__ == "__main__":
    import argparse
    import tempfile

    from . import workloads
    from .measures import Context as _Context

    class _Scratch:  # the one part of workloads.Files these measures use
        def __init__(self, folder: Path):
            self.folder = folder

        def scratch(self, name: str) -> Path:
            return self.folder / name

    parser = argparse.ArgumentParser(prog="python -m benchmarks.delta")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=[m.__name__ for m in MEASURES])
    args = parser.parse_args()
    scale = workloads.QUICK if args.quick else workloads.FULL
    with tempfile.TemporaryDirectory(prefix="lazystore-delta-") as tmp:
        ctx = _Context(scale, _Scratch(Path(tmp)), None)
        for measure in MEASURES:
            if args.only and measure.__name__ != args.only:
                continue
            for r in measure(ctx):
                ratio = f"{r.ratio:.3f}" if r.ratio is not None else ""
                print(f"{r.name:28} {r.ours:10.3f} {r.unit:4} anchor {r.anchor if r.anchor is not None else '':<10} "
                      f"ratio {ratio:6} {r.status or '':5} {r.note}", flush=True)
