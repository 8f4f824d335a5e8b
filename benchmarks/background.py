"""Background saves: what training pays while a checkpoint is written.

- ``pause``: how long ``CheckpointManager.save_async(...)`` holds
  the caller for a 512 MiB state (quick: 64 MiB), against a blocking save of
  the same state (the target), a plain copy of its bytes into buffers (the
  physical limit of a snapshot), and ``dcp.async_save`` with DCP's
  FileSystemWriter (its pause and its total time).
- ``training``: the step time of a real training loop (all-MiniLM-L6-v2,
  AdamW) while checkpoints are saved every few steps, in the background or
  blocking, against the same loop without saves; and, to choose between a
  writer thread and a writer process, the same loop while a thread or a
  separate process writes checkpoints non-stop.
- ``memory``: peak RSS of a fresh process saving its state in the
  background again and again, over the state's own size.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from functools import partial

import numpy as np

from . import workloads
from .measures import Context, MiB, Result, Target, size_label, timed
from .timing import Timing, compare

PAUSE_LAYERS = 16  # 512 MiB of float32 (quick mode: the run's own 2 layers, 64 MiB)


def _torch_state(layers: int, seed: int = 11) -> dict:
    import torch

    return {"model": {k: torch.from_numpy(v) for k, v in workloads.checkpoint(layers, seed=seed).items()}, "step": 0}


def _tensor_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t in state["model"].values())


def pause(ctx: Context) -> list[Result]:
    """The state in host memory."""
    return _pause(ctx, "cpu")


def gpu_pause(ctx: Context) -> list[Result]:
    """The state on a CUDA GPU: the snapshot is a copy into pinned host
    buffers. No rows without a GPU."""
    import torch

    return _pause(ctx, "cuda:0") if torch.cuda.is_available() else []


def _pause(ctx: Context, device: str) -> list[Result]:
    import torch
    import torch.distributed.checkpoint as tdcp

    import lazystore as ls

    warnings.filterwarnings("ignore", module="torch.distributed")
    layers = PAUSE_LAYERS if ctx.scale.mode == "full" else ctx.scale.layers
    state = _torch_state(layers)
    state["model"] = {k: t.to(device) for k, t in state["model"].items()}
    on_gpu = device != "cpu"
    n = _tensor_bytes(state)
    root = ctx.files.scratch("background")
    mgr = ls.CheckpointManager(root / f"mgr-{device}", keep_last=1)
    # the plain copy: into pinned buffers from a GPU (as the snapshot does), numpy buffers from the CPU
    buffers = {k: torch.empty(t.shape, dtype=t.dtype, pin_memory=True) if on_gpu else np.empty_like(t.numpy())
               for k, t in state["model"].items()}
    dcp_dir = root / f"dcp-{device}"
    pending = []

    def settle() -> None:
        # Untimed, before every call: nothing of the previous case still runs or waits for the disk.
        mgr.wait()
        while pending:
            pending.pop().result()
        for p in dcp_dir.glob("*") if dcp_dir.exists() else ():
            p.unlink()
        os.sync()

    def background() -> object:
        state["step"] += 1
        return mgr.save_async(state["step"], state)

    def background_durable() -> object:
        return background().result()

    def blocking() -> object:
        state["step"] += 1
        return mgr.save(state["step"], state)

    def memcpy() -> None:
        for k, t in state["model"].items():
            if on_gpu:
                buffers[k].copy_(t, non_blocking=True)
            else:
                np.copyto(buffers[k], t.numpy())
        if on_gpu:
            torch.cuda.synchronize()

    def dcp_async() -> object:
        future = tdcp.async_save(state["model"], storage_writer=tdcp.FileSystemWriter(dcp_dir), no_dist=True)
        pending.append(future)
        return future

    def dcp_async_durable() -> object:
        return dcp_async().result()

    t = compare({"background save": background, "blocking save": blocking, "memcpy": memcpy,
                 "background save, until durable": background_durable,
                 "dcp.async_save FileSystemWriter": dcp_async,
                 "dcp.async_save FileSystemWriter, until durable": dcp_async_durable},
                reps=ctx.scale.reps, setup=settle)
    settle()
    mgr.close()
    size = size_label(n) + (f" on {torch.cuda.get_device_name()}" if on_gpu else "")
    common = {"nbytes": n, "group": "background"}
    rows = [
        timed("bg_pause", f"training pause of a background save of {size} (CheckpointManager, blocking=False)", t,
              "background save", "blocking save", target=Target("<=", 0.3, "ratio"), nbytes=n,
              note="the pause: the state checked, the target opened, every tensor copied into the manager's "
                   "snapshot buffers (reused: the warm-up round allocated them)"),
        timed("bg_pause_vs_memcpy", f"background save's pause over a plain copy of the {size} into buffers", t,
              "background save", "memcpy", **common),
        timed("bg_durable", f"background save of {size}, call to durable, over a blocking save", t,
              "background save, until durable", "blocking save", **common),
        timed("bg_dcp_async_pause", f"dcp.async_save pause, {size}, FileSystemWriter, over ours", t,
              "dcp.async_save FileSystemWriter", "background save", **common),
        timed("bg_dcp_async_durable", f"dcp.async_save call to durable, {size}, FileSystemWriter, over ours", t,
              "dcp.async_save FileSystemWriter, until durable", "background save, until durable", **common),
    ]
    if on_gpu:
        for row in rows:
            row.name += "_gpu"
    return rows


# -- a real training loop ---------------------------------------------------------------

# The writer process: the same work as the background worker thread (one
# thread doing its chunk work inline, at the worker's lower priority).
CONTINUOUS_WRITER = """
import os, sys, threading, numpy as np, lazystore as ls
from lazystore.writing.background import WORKER_NICENESS
state = {f"t{i}": np.full((1024, 1024), i, np.float32) for i in range(int(sys.argv[2]))}
os.nice(WORKER_NICENESS)

def loop():
    print("ready", flush=True)
    while True:
        ls.save(state, sys.argv[1])

worker = threading.Thread(target=loop, name="lazystore-writer")
worker.start()
worker.join()
"""


class _Writer:
    """Saves ``state`` (``mib`` MiB) non-stop while the training loop is timed:
    on a thread of this process set up as the background worker is, or in a
    separate process doing the same (with its own copy of the state)."""

    def __init__(self, kind: str, path, state: dict, mib: int):
        self.kind, self.path, self.state, self.mib = kind, path, state, mib
        self._stop = threading.Event()

    def __enter__(self):
        import lazystore as ls
        from lazystore.writing.background import _lower_priority

        if self.kind == "process":
            self._proc = subprocess.Popen([sys.executable, "-c", CONTINUOUS_WRITER, str(self.path), str(self.mib)],
                                          stdout=subprocess.PIPE, text=True)
            assert self._proc.stdout.readline().strip() == "ready"
            return self
        def loop():
            _lower_priority()
            while not self._stop.is_set():
                ls.save(self.state, self.path)

        # Named lazystore-*: chunk work inline, as on the background worker.
        self._thread = threading.Thread(target=loop, name="lazystore-bench-writer")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.kind == "process":
            self._proc.kill()
            self._proc.wait()
        else:
            self._stop.set()
            self._thread.join()


def training(ctx: Context) -> list[Result]:
    import torch

    import lazystore as ls

    from .minilm_model import Trainer

    quick = ctx.scale.mode == "quick"
    trainer = Trainer(batch=2 if quick else 4, tokens=16 if quick else 32)
    every, steps = (2, 2) if quick else (5, 15)  # saves at steps 0, every, 2 * every, ...
    for _ in range(2):
        trainer.step()  # warm: first steps allocate AdamW's moments
    root = ctx.files.scratch("background-training")
    managers = {label: ls.CheckpointManager(root / label, keep_last=1, compression=comp)
                for label, comp in (("raw", None), ("zstd", "zstd"), ("blocking", None))}
    n = sum(np.asarray(v).nbytes for v in _tensors(trainer.state()))

    def loop(save=None) -> None:
        for i in range(steps):
            if save is not None and i % every == 0:
                save(trainer.steps, trainer.state())
            trainer.step()

    def settle() -> None:
        for mgr in managers.values():
            mgr.wait()
        os.sync()

    def saving(label, blocking=False):
        mgr = managers[label]
        return partial(loop, mgr.save if blocking else mgr.save_async)  # called as save(step, state)

    mib = max(16, n // MiB)
    writer_state = {f"t{i}": np.full((1024, 1024), i, np.float32) for i in range(mib)}
    inner: dict[str, list[float]] = {}

    def clocked(label, run, writer=None):
        """``run`` timed by its own clock: a writer starts (a process, an
        interpreter) before the clock does, and stops after."""
        def case():
            with writer() if writer else contextlib.nullcontext():
                start = time.perf_counter()
                run()
                inner.setdefault(label, []).append(time.perf_counter() - start)
        return case

    def writing(kind):
        return partial(_Writer, kind, root / f"{kind}.lzy", writer_state, mib)

    cases = {"no saves": loop, "background saves": saving("raw"), "background saves, zstd": saving("zstd"),
             "blocking saves": saving("blocking", blocking=True)}
    cases = {label: clocked(label, run) for label, run in cases.items()}
    cases["a writer thread, non-stop"] = clocked("a writer thread, non-stop", loop, writing("thread"))
    cases["a writer process, non-stop"] = clocked("a writer process, non-stop", loop, writing("process"))
    torch.manual_seed(0)
    # Step times swing with whatever else runs on the machine: more rounds than
    # the other measures, and ratios taken within each round (see _paired).
    # Quick mode is a smoke run of every case (the test suite runs it): one round.
    compare(cases, reps=1 if quick else 2 * ctx.scale.reps, setup=settle)
    settle()
    t = {label: Timing(tuple(samples[1:])) for label, samples in inner.items()}  # [0]: the warm-up round
    for mgr in managers.values():
        mgr.close()
    what = (f"{steps} AdamW steps of all-MiniLM-L6-v2 ({n / MiB:.0f} MiB of state), "
            f"a checkpoint every {every} steps")
    non_stop = f"{steps} steps while {{}} writes {mib} MiB checkpoints non-stop (one core, nice +10)"
    return [
        _paired("bg_train_overhead", f"{what}, saved in the background, over no saves", t,
                "background saves", "no saves"),
        _paired("bg_train_overhead_zstd", f"{what}, saved in the background with zstd, over no saves", t,
                "background saves, zstd", "no saves"),
        _paired("bg_train_overhead_blocking", f"{what}, blocking saves, over no saves", t,
                "blocking saves", "no saves"),
        _paired("bg_train_thread_writer", non_stop.format("a thread") + ", over no writer", t,
                "a writer thread, non-stop", "no saves"),
        _paired("bg_train_process_writer", non_stop.format("another process") + ", over no writer", t,
                "a writer process, non-stop", "no saves"),
        _paired("bg_train_thread_vs_process", non_stop.format("a thread") + ", over a process doing the same", t,
                "a writer thread, non-stop", "a writer process, non-stop"),
    ]


def _paired(name, title, t: dict[str, Timing], subject, anchor) -> Result:
    """A row whose ratio is the median of the per-round ratios: each round ran
    every case back to back, so a slow spell of the machine cancels out."""
    row = timed(name, title, t, subject, anchor, group="background",
                note="ratio: median of the ratios within each round (cases interleaved)")
    row.ratio = statistics.median(a / b for a, b in zip(t[subject].samples, t[anchor].samples))
    return row


def _tensors(state: dict):
    from lazystore.views import tree

    return [tree.as_array(v) for v in tree.flatten(state)[1].values()]


# -- memory -----------------------------------------------------------------------------------

# Runs in a fresh interpreter: argv = folder, MiB of state, saves.
_RSS_SCRIPT = """
import json, resource, sys, torch, lazystore as ls
folder, mib, saves = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
state = {"model": {f"w{i}": torch.full((256, 1024), float(i)) for i in range(mib)}, "step": 0}
import lazystore.writing.background  # everything imported before the baseline
baseline = rss()
peaks = []
with ls.CheckpointManager(folder, keep_last=1) as mgr:
    for step in range(saves):
        for t in state["model"].values():
            t.add_(1)
        mgr.save_async(step, state)
        mgr.wait()
        peaks.append(rss())
print(json.dumps({"baseline": baseline, "peaks": peaks}))
"""
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"  # a clean ru_maxrss (see measures)


def memory(ctx: Context) -> list[Result]:
    mib = 256 if ctx.scale.mode == "full" else 32
    folder = ctx.files.scratch("background-rss")
    cmd = [sys.executable, "-c", _LAUNCHER, sys.executable, "-c", _RSS_SCRIPT, str(folder), str(mib), "5"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    first, last = out["peaks"][0] - out["baseline"], out["peaks"][-1] - out["baseline"]
    return [
        Result("bg_peak_rss", f"peak RSS over the state's, 5 background saves of a {mib} MiB state",
               last, mib, "MiB", last / mib, None, "memory", anchor_label="the state's size", group="background",
               note=f"after the first save: +{first:.0f} MiB; after the fifth: +{last:.0f} MiB "
                    "(the snapshot buffers are reused, so the peak does not grow)"),
    ]


MEASURES = (pause, gpu_pause, training, memory)
