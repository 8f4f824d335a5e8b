"""``python -m benchmarks.exponent [--quick] [--reps N]``: issue 29's
exponent coder (codec 4, ``compression="huffman"``) against today's
``compression="zstd"`` (codec 1) and ZipNN 0.5.4, side by side in one run.

Rows (the trained weights of all-MiniLM-L6-v2, its floating-point tensors):

- **fp32**: MiniLM as shipped;
- **bf16**: its bfloat16 copy (ml_dtypes' cast: round to nearest even);
- **bf16, tiled**: a ~500 MB bfloat16 model made by repeating MiniLM's
  bf16 tensors under new names (no larger trained model is installed).
  Its statistics are trained weights', but repeated: every coder here codes
  each tensor (lazystore: each chunk) on its own, so no coder sees the
  repeats; the row measures scale, not new weights.

Columns, each coder on the same tensors:

- **ratio**: tensor bytes / stored bytes (lazystore: the file's size;
  ZipNN: the sum of its per-tensor blobs, as its safetensors path stores
  them, headers included);
- **single-thread decode**: ``ls.load`` run on a thread named
  ``lazystore-*``, on which lazystore's pool does the chunk work inline
  (``lazystore._core.parallel.start_all``), against ZipNN's ``decompress``
  of every tensor with ``threads=1``; GB/s of tensor bytes, one core;
- **CPU per GB**: CPU time of ``ls.load`` (all its threads, process time)
  of the huffman file over the zstd file's;
- **wall time**: ``ls.load`` (its thread pool, every core) over one zstd-3
  decompression of the same bytes in one call (``decode.zstd3_frame``,
  the anchor of ``python -m benchmarks.decode``);
- **save**: ``ls.save`` with ``compression="huffman"`` over
  ``compression="zstd"`` (page cache, not fsync'd);
- **2-deep delta restore** (MiniLM rows): the oldest of three checkpoints
  saved by ``CheckpointManager(delta=True)`` (each step moves every weight
  by about AdamW's step, 2e-5; bf16 keeps fp32 master weights and stores
  their cast), restored with ``ls.load``, huffman over zstd: reported only.

Loads are ``ls.load(path, verify=False)`` as in ``benchmarks.decode`` (the
check's cost is measured in ``benchmarks.verify_load``), except the delta
restore, which loads as the manager's users do (checked).

Until codec 4 is registered (``codec_for("huffman")`` refuses it), the
huffman column is left out and only the zstd and ZipNN figures are
measured; ZipNN's column is left out where ``zipnn`` is not installed (the
``bench`` extra has it). Figures are medians of interleaved rounds
(``timing.compare``): quote the ratios, not the absolute times.
``--profile`` also prints where a one-thread ``ls.load`` of the bf16 file
spends its time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import numpy as np
import zstandard

from . import anchors, report, workloads
from .decode import zstd3_frame
from .measures import Result, Target, size_label, timed
from .timing import Timing, compare, cpu_time

NEW, OLD, ZIPNN = "huffman", "zstd", "ZipNN"
# The targets (docs/design/29-exponent-coder.md §6).
RATIO_GOAL = {"fp32": 1.22, "bf16": 1.50}
CPU_TARGET = 0.5  # CPU time of ls.load, huffman over zstd
WALL_TARGET = 0.2  # ls.load over one zstd-3 decompression
SAVE_TARGET = 1.1  # save, huffman over zstd
TILED_BYTES = {"full": 500 * 10**6, "quick": 24 << 20}
# A quick run's MiniLM: its first two encoder layers (14 MiB of fp32).
QUICK_PREFIXES = ("encoder.layer.0.", "encoder.layer.1.")
DELTA_STEPS = 3  # checkpoints in the series: the oldest is two deltas deep
DELTA_STEP = 2e-5  # how far each weight moves per step (about AdamW's lr)
ONE_THREAD = "lazystore-bench-one-thread"


def available(compression: str) -> bool:
    """Whether this lazystore has the codec (codec 4 is being built in parallel)."""
    from lazystore.codecs.registry import codec_for
    from lazystore.errors import InvalidInputError

    try:
        codec_for(compression)
    except InvalidInputError:
        return False
    return True


def codecs() -> tuple[str, ...]:
    return tuple(c for c in (OLD, NEW) if available(c))


# -- the workloads ---------------------------------------------------------------------


def minilm_floats(quick: bool) -> dict[str, np.ndarray]:
    """MiniLM's floating-point tensors (all but the int64 position ids), or a
    quick run's two encoder layers of them."""
    tensors = {k: v for k, v in workloads.minilm().items() if v.dtype.kind == "f"}
    if quick:
        tensors = {k: v for k, v in tensors.items() if k.startswith(QUICK_PREFIXES)}
    return tensors


def tiled(tensors: dict[str, np.ndarray], total: int) -> dict[str, np.ndarray]:
    """``tensors`` repeated under new names until about ``total`` bytes (the
    same arrays: no memory is copied)."""
    copies = max(1, round(total / workloads.nbytes(tensors)))
    return {f"copy{i}.{k}": v for i in range(copies) for k, v in tensors.items()}


def variants(quick: bool) -> dict[str, tuple[str, dict]]:
    """label -> (description, tensors)."""
    fp32 = minilm_floats(quick)
    bf16 = workloads.to_bfloat16(fp32)
    big = tiled(bf16, TILED_BYTES["quick" if quick else "full"])
    part = " (two encoder layers)" if quick else ""
    return {
        "fp32": (f"all-MiniLM-L6-v2 fp32{part}", fp32),
        "bf16": (f"all-MiniLM-L6-v2 bf16{part}", bf16),
        "bf16_tiled": (f"MiniLM bf16 tiled x{len(big) // len(bf16)} (repeated trained weights)", big),
    }


# -- ZipNN -----------------------------------------------------------------------------


class ZipNNTensors:
    """Tensors compressed one by one with ZipNN's byte API (as its
    safetensors path compresses them), decoded on one thread."""

    def __init__(self, tensors: dict[str, np.ndarray]):
        from zipnn import ZipNN

        # One coder per dtype; ZipNN reads the rest from each blob's header.
        self.coders = {dt: ZipNN(input_format="byte", bytearray_dtype=dt, threads=1)
                       for dt in {self._dtype(v) for v in tensors.values()}}
        self.blobs = {k: self.coders[self._dtype(v)].compress(np.ascontiguousarray(v).tobytes())
                      for k, v in tensors.items()}
        self.dtypes = {k: self._dtype(v) for k, v in tensors.items()}

    @staticmethod
    def _dtype(array: np.ndarray) -> str:
        return {"float32": "float32", "bfloat16": "bfloat16"}[array.dtype.name]

    @classmethod
    def of(cls, tensors: dict[str, np.ndarray]) -> ZipNNTensors | None:
        """None where zipnn is not installed."""
        if importlib.util.find_spec("zipnn") is None:
            return None
        return cls(tensors)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.blobs.values())

    def decode(self) -> dict:
        return {k: self.coders[self.dtypes[k]].decompress(b) for k, b in self.blobs.items()}


# -- helpers ---------------------------------------------------------------------------


def one_thread(pool: ThreadPoolExecutor, fn):
    """``fn`` run on ``pool``'s one thread, named ``lazystore-*``: lazystore's
    chunk work then runs inline on it (parallel.start_all), on one core."""
    return lambda: pool.submit(fn).result()


def _same(tensors: dict, loaded: dict) -> bool:
    return all(np.ascontiguousarray(loaded[k]).tobytes() == v.tobytes() for k, v in tensors.items())


def _ratio_row(name: str, title: str, ours: float, anchor: float | None, subject: str, anchor_label: str,
               target: Target | None = None, note: str = "") -> Result:
    return Result(name, title, ours, anchor, "x", ours / anchor if anchor else None, target, "size",
                  subject=subject, anchor_label=anchor_label, note=note, group="" if target else "exponent")


def _alone(name: str, title: str, t: dict[str, Timing], subject: str, n: int, note: str = "") -> Result:
    """An informational row of one case's time (what has no counterpart yet)."""
    return timed(name, title, t, subject, nbytes=n, note=note, group="exponent")


def _time_row(name, title, t: dict[str, Timing], ours: str, anchor: str, n: int, target: Target | None = None,
              note: str = "") -> Result:
    return timed(name, title, t, ours, anchor, target=target, nbytes=n, note=note,
                 group="" if target else "exponent")


# -- the measures ----------------------------------------------------------------------


def ratios(label: str, what: str, n: int, sizes: dict[str, int]) -> list[Result]:
    ratio = {c: n / size for c, size in sizes.items()}
    rows = [_ratio_row(f"ref_exponent_ratio_{label}_{c.lower()}", f"compression of {what}", ratio[c], None, c, "")
            for c in (OLD, ZIPNN) if c in ratio]
    if NEW not in ratio:
        return rows
    goal = RATIO_GOAL.get(label)
    anchor = ZIPNN if ZIPNN in ratio else OLD
    rows.insert(0, _ratio_row(f"exponent_ratio_{label}", f"compression of {what}", ratio[NEW], ratio[anchor],
                              NEW, anchor, Target(">=", goal, "ours") if goal else None,
                              note=f"zstd {ratio.get(OLD, 0):.4f}x, ZipNN {ratio.get(ZIPNN, 0):.4f}x"))
    if label == "bf16" and ZIPNN in ratio:
        rows.insert(1, _ratio_row("exponent_ratio_bf16_zipnn", f"compression of {what}, over ZipNN's",
                                  ratio[NEW], ratio[ZIPNN], NEW, ZIPNN, Target(">=", 1.0, "ratio")))
    return rows


def single_thread(label: str, what: str, n: int, paths: dict[str, Path], zipnn: ZipNNTensors | None,
                  reps: int) -> list[Result]:
    with ThreadPoolExecutor(1, thread_name_prefix=ONE_THREAD) as pool:
        cases = {c: one_thread(pool, partial(anchors.ls_load, p)) for c, p in paths.items()}
        if zipnn is not None:
            cases[ZIPNN] = zipnn.decode
        t = compare(cases, reps=reps)
    title = f"single-thread decode of {what}"
    anchor = ZIPNN if zipnn is not None else None
    rows = []
    for c in cases:
        if c == NEW and anchor:
            rows.append(_time_row(f"exponent_decode1_{label}", title, t, NEW, ZIPNN, n,
                                  Target("<", 1.0, "ratio") if label in RATIO_GOAL else None,
                                  note="ls.load on one thread against ZipNN decompress(threads=1), tensor by tensor"))
        elif c != ZIPNN and anchor:
            rows.append(_time_row(f"ref_exponent_decode1_{label}_{c}", title, t, c, ZIPNN, n))
        else:
            rows.append(_alone(f"ref_exponent_decode1_{label}_{c.lower()}", title, t, c, n))
    return rows


def cpu_and_wall(label: str, what: str, n: int, paths: dict[str, Path], tensors: dict, reps: int) -> list[Result]:
    cpu = {c: cpu_time(partial(anchors.ls_load, p), reps=reps) for c, p in paths.items()}
    blob = zstd3_frame(tensors)
    cases: dict[str, Callable[[], object]] = {c: partial(anchors.ls_load, p) for c, p in paths.items()}
    cases["zstd-3 decompress"] = partial(zstandard.ZstdDecompressor().decompress, blob)
    t = compare(cases, reps=reps)
    targeted = label in RATIO_GOAL
    rows = []
    cpu_note = ", ".join(f"{c} {cpu[c] / (n / 1e9):.3f} CPU s/GB" for c in cpu)
    if NEW in cpu:
        rows.append(Result(f"exponent_cpu_{label}", f"CPU time of ls.load of {what}", cpu[NEW], cpu[OLD], "s",
                           cpu[NEW] / cpu[OLD], Target("<=", CPU_TARGET, "ratio") if targeted else None, "time",
                           subject=NEW, anchor_label=OLD, nbytes=n, note=cpu_note,
                           group="" if targeted else "exponent"))
    rows.append(Result(f"ref_exponent_cpu_{label}_zstd", f"CPU time of ls.load of {what}", cpu[OLD], None, "s",
                       None, None, "time", subject=OLD, nbytes=n, note=cpu_note, group="exponent"))
    anchor_note = f"anchor: one zstd-3 frame of the same bytes ({n / len(blob):.3f}x), one call"
    for c in paths:
        target = Target("<=", WALL_TARGET, "ratio") if c == NEW and targeted else None
        rows.append(_time_row(f"exponent_wall_{label}" if c == NEW else f"ref_exponent_wall_{label}_{c}",
                              f"ls.load of {what}, {c}", t, c, "zstd-3 decompress", n, target, anchor_note))
    return rows


def save_time(label: str, what: str, n: int, tensors: dict, folder: Path, reps: int) -> list[Result]:
    out = folder / f"exponent-save-{label}.lzy"
    cases = {c: partial(anchors.ls_save, tensors, out, c) for c in codecs()}
    t = compare(cases, reps=reps, setup=lambda: out.unlink(missing_ok=True))
    out.unlink(missing_ok=True)
    if NEW not in cases:
        return [_alone(f"ref_exponent_save_{label}_zstd", f"ls.save of {what}", t, OLD, n)]
    return [_time_row(f"exponent_save_{label}", f"ls.save of {what}", t, NEW, OLD, n,
                      Target("<=", SAVE_TARGET, "ratio") if label in RATIO_GOAL else None)]


def delta_series(tensors: dict) -> list[dict]:
    """DELTA_STEPS training states: fp32 master weights that move ``DELTA_STEP``
    (up or down) per step, stored in ``tensors``' dtypes."""
    rng = np.random.default_rng(29)
    master = {k: v.astype(np.float32) for k, v in tensors.items()}
    states = []
    for _ in range(DELTA_STEPS):
        states.append({k: m.astype(tensors[k].dtype) for k, m in master.items()})
        for m in master.values():
            m += np.where(rng.random(m.shape) < 0.5, -DELTA_STEP, DELTA_STEP).astype(np.float32)
    return states


def delta_restore(label: str, what: str, n: int, tensors: dict, folder: Path, reps: int) -> list[Result]:
    import lazystore as ls

    from .delta import _depth

    states = delta_series(tensors)
    oldest, depth = {}, {}
    for c in codecs():
        mgr = ls.CheckpointManager(folder / f"exponent-delta-{label}-{c}", compression=c, delta=True)
        for step, state in enumerate(states):
            mgr.save(step, state)
        mgr.close()
        first = mgr.steps()[0]
        oldest[c], depth[c] = mgr.path(first), _depth(mgr, first)
    assert _same(states[0], ls.load(oldest[OLD])), "the oldest delta restores other values"
    t = compare({c: partial(ls.load, p) for c, p in oldest.items()}, reps=reps)
    for c in oldest:
        shutil.rmtree(folder / f"exponent-delta-{label}-{c}")
    title = f"restore of the oldest of {DELTA_STEPS} delta checkpoints of {what}"
    note = "deltas deep: " + ", ".join(f"{c} {d}" for c, d in depth.items())
    if NEW not in oldest:
        return [_alone(f"ref_exponent_delta_{label}_zstd", title, t, OLD, n, note)]
    return [_time_row(f"exponent_delta_{label}", title, t, NEW, OLD, n, note=note)]


def measure_variant(label: str, what: str, tensors: dict, folder: Path, reps: int) -> list[Result]:
    n = workloads.nbytes(tensors)
    what = f"{what} ({len(tensors)} tensors, {size_label(n)})"
    paths = {c: folder / f"exponent-{label}-{c}.lzy" for c in codecs()}
    for c, path in paths.items():
        anchors.ls_save(tensors, path, compression=c)
        assert _same(tensors, anchors.ls_load(path)), f"{c} loads other values"
    zipnn = ZipNNTensors.of(tensors)
    sizes = {c: p.stat().st_size for c, p in paths.items()}
    if zipnn is not None:
        assert _same(tensors, {k: np.frombuffer(b, np.uint8) for k, b in zipnn.decode().items()}), "ZipNN differs"
        sizes[ZIPNN] = zipnn.nbytes
    rows = ratios(label, what, n, sizes)
    rows += single_thread(label, what, n, paths, zipnn, reps)
    del zipnn
    rows += cpu_and_wall(label, what, n, paths, tensors, reps)
    for path in paths.values():
        path.unlink()
    rows += save_time(label, what, n, tensors, folder, reps)
    if label in RATIO_GOAL:  # the MiniLM rows
        rows += delta_restore(label, what, n, tensors, folder, reps)
    return rows


def run(folder: Path, quick: bool, reps: int, log=lambda message: None) -> list[Result]:
    rows = []
    for label, (what, tensors) in variants(quick).items():
        log(f"exponent coder: {what}")
        rows += measure_variant(label, what, tensors, folder, reps)
    return rows


def exponent_coder(ctx) -> list[Result]:
    """The measure of ``python -m benchmarks``: every row above, at the run's scale."""
    return run(ctx.files.folder, ctx.scale.mode == "quick", ctx.scale.reps)


MEASURES = (exponent_coder,)


# -- where the time goes ---------------------------------------------------------------


def profile(path: Path, top: int = 25) -> str:
    """Where a one-thread ``ls.load`` of ``path`` spends its time: cProfile's
    functions by their own time. It sees Python code and each call into C
    (the kernels' decode, xxh3, zstd) as a whole; the split inside a kernel
    call (table build, stream decode, merge, page faults) needs a native
    profiler: ``py-spy record --native -r 250 -- python -m benchmarks.exponent``."""
    profiler = cProfile.Profile()

    def load():
        profiler.enable()  # this thread only: the one that does the work
        try:
            anchors.ls_load(path)
        finally:
            profiler.disable()

    with ThreadPoolExecutor(1, thread_name_prefix=ONE_THREAD) as pool:
        pool.submit(anchors.ls_load, path).result()  # warm: imports, page cache
        pool.submit(load).result()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def profile_bf16(folder: Path, quick: bool) -> str:
    what, tensors = variants(quick)["bf16"]
    compression = NEW if available(NEW) else OLD
    path = folder / f"profile-bf16-{compression}.lzy"
    anchors.ls_save(tensors, path, compression=compression)
    try:
        return f"one-thread ls.load of {what}, {compression}:\n" + profile(path)
    finally:
        path.unlink()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.exponent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="MiniLM's first two layers, 2 rounds: a smoke run")
    parser.add_argument("--reps", type=int, default=None, help="rounds per case (default 7; quick 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument("--json", type=Path, default=None, help="also write every row and sample to this file")
    parser.add_argument("--profile", action="store_true", help="also print where a one-thread load of bf16 goes")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 7)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lazystore-exponent-", dir=args.workdir) as tmp:
        rows = run(Path(tmp), args.quick, reps, report.log)
        where = profile_bf16(Path(tmp), args.quick) if args.profile else ""
    info = {"mode": "quick" if args.quick else "full", "command": "python -m benchmarks.exponent"
            + (" --quick" if args.quick else ""), "reps": reps, "codecs": list(codecs()),
            "seconds": time.perf_counter() - start, "machine": report.machine()}
    print(report.table(rows))
    print(f"\n{reps} interleaved rounds per case, medians; {info['seconds']:.0f} s; "
          f"machine: {json.dumps(info['machine'])}")
    if where:
        print("\n" + where)
    if args.json:
        args.json.write_text(json.dumps(report.as_json(rows, info), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
