"""Delta checkpoints (issues 17 and 27): series size, a frozen base, save and restore time.

All on a real fine-tune (benchmarks/finetune.py: transformers' BertModel of
all-MiniLM-L6-v2 with its trained weights, AdamW, lr 2e-5, on the CPU),
side by side in one run, as issue 27's table asks:

- ``series``: a series of 8 checkpoints, one every 1, 10 and 100 steps
  (quick mode: 4 checkpoints, every step), stored by ``CheckpointManager(delta=True)``
  (the newest whole, older ones deltas against newer ones) with zstd, over
  the same series stored standalone with zstd. The target rows are the
  model's weights, as the issue measured them (a ~75 MB checkpoint); the
  rows with the AdamW moments too are informational, as are the
  alternatives: ``delta_depth=1`` and ``delta_depth=7`` (shorter and longer
  chains), every delta against the previous checkpoint (a forward chain)
  and against the first (one keyframe), both written with ``ls.save(base=)``.
- ``frozen``: ten checkpoints of a model whose 16 MiB base (real trained
  weights) is frozen while its LoRA adapters train, over one checkpoint.
- ``timing``: the 10-step series (quick: every step) saved by a manager
  with ``keep_last=8``, ``delta=True`` against ``delta=False``: the total
  time to save the series (blocking saves, each delta save including the
  rewrite of the checkpoint before it), the restore of the latest and of
  the oldest checkpoint over the same step stored standalone, and the
  training pause of a ``save_async`` (the call, with no save in
  flight) over that of the standalone manager.

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
# delta_depth values whose oldest restore a full run also times (informational).
OTHER_DEPTHS = (1, 3, 7)


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
    manager's policy), "star" / "long" (the manager's, ``delta_depth`` 1 / 7),
    "chain" (each against the previous) or "first" (each against the first)."""
    mgr = _series(folder, paths, model_only, how)
    sizes = [mgr.path(i).stat().st_size for i in range(len(paths))]
    shutil.rmtree(folder)
    return sizes


def _series(folder: Path, paths: list[Path], model_only: bool, how: str):
    """The manager of ``folder`` after storing the series there ``how`` (see :func:`_store`)."""
    import lazystore as ls

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    depth = {"star": {"delta_depth": 1}, "long": {"delta_depth": 7}}.get(how, {})
    mgr = ls.CheckpointManager(folder, compression="zstd", delta=how in ("delta", "star", "long"), **depth)
    for i, path in enumerate(paths):
        state = _state(path, model_only)
        if how in ("standalone", "delta", "star", "long") or i == 0:
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
            hows = ("delta", "star", "long", "chain", "first") if model_only else ("delta",)
            for how in hows:
                sizes = _store(root / how, paths, model_only, how)
                size = sum(sizes)
                each = " ".join(f"{a / b:.2f}" for a, b in zip(sizes, alones))
                target = Target("<=", 0.6, "ratio") if (how == "delta" and model_only) else None
                label = {"delta": "CheckpointManager(delta=True)", "star": "delta_depth=1",
                         "long": "delta_depth=7", "chain": "each against the previous (forward)",
                         "first": "each against the first"}[how]
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
    sizes.insert(0, sizes.pop())  # the newest, whole, first: one checkpoint
    shutil.rmtree(folder)
    adapter_bytes = sum(a.nbytes for a in adapters.values())
    return [Result("delta_frozen", f"10 checkpoints, frozen {total / 2**20:.0f} MiB base + "
                   f"{adapter_bytes / 2**10:.0f} KiB of LoRA adapters, delta=True, over one checkpoint",
                   sum(sizes) / 2**20, sizes[0] / 2**20, "MiB", sum(sizes) / sizes[0], Target("<=", 1.6, "ratio"),
                   "size", anchor_label="one checkpoint",
                   note=f"the newest (whole) {sizes[0] / 2**20:.1f} MiB, the nine others "
                        f"{sum(sizes[1:]) / 2**20:.2f} MiB",
                   group="delta")]


def timing(ctx: Context) -> list[Result]:
    import lazystore as ls

    interval = 10 if ctx.scale.mode == "full" else 1
    states = [_state(p, True) for p in _checkpoints(ctx, interval)]
    folder = ctx.files.scratch("delta-timing")
    managers = {}

    def series_of(how: str):
        def save_all():  # the whole series, blocking saves: a delta save includes its rewrite
            shutil.rmtree(folder / how, ignore_errors=True)
            mgr = managers[how] = ls.CheckpointManager(folder / how, compression="zstd", delta=how == "delta",
                                                       keep_last=8)
            for i, state in enumerate(states):
                mgr.save(i, state)
            mgr.close()
        return save_all

    saves = compare({"delta series": series_of("delta"), "standalone series": series_of("alone")},
                    reps=ctx.scale.reps)
    delta, alone = managers["delta"], managers["alone"]
    latest, oldest = delta.latest(), delta.steps()[0]
    depth = _depth(delta, oldest)
    # The other side of the series' size: the oldest restore at other depths
    # (full runs only; the quick series is too short to reach them).
    depths = OTHER_DEPTHS if ctx.scale.mode == "full" else ()
    others = {d: _saved(folder / f"depth{d}", states, delta_depth=d) for d in depths}
    loads = compare({"latest, delta": lambda: ls.load(delta.path(latest)),
                     "latest, standalone": lambda: ls.load(alone.path(latest)),
                     "oldest, delta": lambda: ls.load(delta.path(oldest)),
                     "oldest, standalone": lambda: ls.load(alone.path(oldest)),
                     **{f"oldest, delta_depth={d}": (lambda m=m: ls.load(m.path(m.steps()[0])))
                        for d, m in others.items()}}, reps=ctx.scale.reps)
    steps = iter(range(len(states), 10**6))

    def pause(mgr):  # the call of a background save; the save itself finishes untimed (setup)
        return lambda: mgr.save_async(next(steps), states[-1])

    pauses = compare({"delta pause": pause(delta), "standalone pause": pause(alone)}, reps=ctx.scale.reps,
                     setup=lambda: (delta.wait(), alone.wait()))
    delta.close()
    alone.close()
    shapes = {d: f"{_depth(m, m.steps()[0])} deltas deep, the series {_bytes(m) / _bytes(alone):.3f}x "
                 "the standalone bytes" for d, m in others.items()}
    shutil.rmtree(folder)
    where = f"{len(states)} checkpoints every {interval} steps, model, keep_last=8"
    measured = [
        ("delta_series_save", saves, "delta series", "standalone series", 2.0,
         f"total save time of the series ({where}), delta=True over delta=False"),
        ("delta_restore_latest", loads, "latest, delta", "latest, standalone", 1.15,
         f"restore of the latest checkpoint ({where}; whole) over the same step standalone"),
        ("delta_restore_oldest", loads, "oldest, delta", "oldest, standalone", 3.0,
         f"restore of the oldest kept checkpoint ({where}; {depth} deltas deep) over the same step standalone"),
        ("delta_pause", pauses, "delta pause", "standalone pause", 1.2,
         f"training pause of a blocking=False save ({where}, no save in flight), delta=True over delta=False"),
    ]
    measured += [(f"delta_restore_oldest_depth{d}", loads, f"oldest, delta_depth={d}", "oldest, standalone", None,
                  f"restore of the oldest kept checkpoint with delta_depth={d} ({where}; {shape}) over the same "
                  "step standalone") for d, shape in shapes.items()]
    rows = []
    for name, timings, ours, anchor, limit, title in measured:
        t, a = timings[ours], timings[anchor]
        spread = (f"{ours} {min(t.samples):.3f}-{max(t.samples):.3f} s, "
                  f"{anchor} {min(a.samples):.3f}-{max(a.samples):.3f} s")
        target = Target("<=", limit, "ratio") if limit else None
        rows.append(Result(name, title, t.median, a.median, "s", t.median / a.median, target,
                           "time", subject=ours, anchor_label=anchor,
                           samples={ours: list(t.samples), anchor: list(a.samples)}, note=spread, group="delta"))
    return rows


def _saved(folder: Path, states: list, **options):
    """A manager (``keep_last=8``, zstd, ``delta=True``) after saving ``states`` into ``folder``."""
    import lazystore as ls

    mgr = ls.CheckpointManager(folder, compression="zstd", delta=True, keep_last=8, **options)
    for i, state in enumerate(states):
        mgr.save(i, state)
    mgr.close()
    return mgr


def _bytes(mgr) -> int:
    return sum(mgr.path(s).stat().st_size for s in mgr.steps())


def _depth(mgr, step: int) -> int:
    """How many deltas deep checkpoint ``step`` is."""
    from lazystore.training.chains import Series

    return Series(mgr, mgr.steps()).depth(step)


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
