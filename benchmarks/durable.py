"""Durable saves: ``ls.save`` of a raw checkpoint against the other tools'
saves followed by an fsync of the file, and against a plain write + fsync
of the same bytes (the limit: lazystore writes those bytes and a little
more).

A measure of the suite (registered in measures.MEASURES, on the suite's
1 GiB checkpoint), and runnable alone at any size, since the disk of a
shared machine is noisy and this measure wants many rounds:

    python -m benchmarks.durable [--mib 512] [--reps 15]

Before every timed save the previous outputs are deleted and ``os.sync()``
runs (untimed), so no save pays for another's writeback. A save waits for
the disk, so its time is mostly the disk's, and the disk is shared: besides
the medians, each row's note gives the quartiles of the per-round ratios
(each round times every case once, back to back).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

from . import anchors, workloads
from .measures import Result, Target, size_label, timed
from .timing import Timing, compare

# issue 18: at most 0.9x safetensors save_file + fsync, and at most 1.0x a
# plain write + fsync of the same bytes.
TARGET_ST = 0.9
TARGET_PLAIN = 1.0
LAYER_MIB = 32  # workloads.LAYER's tensors hold 32 MiB


def measure(tensors: dict, folder: Path, reps: int) -> list[Result]:
    n = workloads.nbytes(tensors)
    savers = {
        "lazystore": (anchors.ls_save, "lzy"),
        "safetensors save_file+fsync": (anchors.durable(anchors.st_save), "st-fsync"),
        "safetensors save_file": (anchors.st_save, "st"),
        "torch.save+fsync": (anchors.durable(anchors.torch_save), "pt"),
        "np.savez+fsync": (anchors.durable(anchors.npz_save), "npz"),
        "plain write+fsync": (anchors.durable(anchors.plain_write), "bin"),
    }
    outputs = [folder / f"save-out.{ext}" for _, ext in savers.values()]

    def clean() -> None:
        # Every call writes a new file, and no call pays for another's writeback.
        for path in outputs:
            path.unlink(missing_ok=True)
        os.sync()

    cases = {label: partial(fn, tensors, path) for (label, (fn, _)), path in zip(savers.items(), outputs)}
    t = compare(cases, reps=reps, setup=clean)
    clean()
    size = size_label(n)
    return [
        timed("save_durable", f"save {size} raw, durable (fsync)", t, "lazystore", "safetensors save_file+fsync",
              target=Target("<=", TARGET_ST, "ratio"), nbytes=n,
              note="lazystore fsyncs the file (and its folder); the anchor is save_file then fsync of the file; "
                   + _round_ratios(t, "safetensors save_file+fsync")),
        timed("save_durable_plain", f"save {size} raw, durable, vs the same bytes written plainly", t, "lazystore",
              "plain write+fsync", target=Target("<=", TARGET_PLAIN, "ratio"), nbytes=n,
              note="the anchor writes the tensors' bytes to a file (os.write of each) then fsyncs it; "
                   + _round_ratios(t, "plain write+fsync")),
        timed("ref_st_save", f"safetensors save_file, {size}, no fsync", t, "safetensors save_file",
              nbytes=n, earlier="1.10 GB/s"),
        timed("ref_torch_save", f"torch.save + fsync, {size}", t, "torch.save+fsync", nbytes=n),
        timed("ref_npz_save", f"np.savez (.npz) + fsync, {size}", t, "np.savez+fsync", nbytes=n),
        timed("ref_write", f"plain file write + fsync, {size}", t, "plain write+fsync", nbytes=n,
              earlier="0.9 GB/s"),
    ]


def _round_ratios(t: dict[str, Timing], anchor: str) -> str:
    """The quartiles of lazystore's time over the anchor's, round by round."""
    ratios = [ours / base for ours, base in zip(t["lazystore"].samples, t[anchor].samples)]
    if len(ratios) < 2:
        return f"one round: {ratios[0]:.2f}"
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return f"per-round ratios {min(ratios):.2f} / {q1:.2f} / {q3:.2f} / {max(ratios):.2f} (min / q1 / q3 / max)"


def save(ctx) -> list[Result]:
    return measure(ctx.take_checkpoint(), ctx.files.folder, ctx.scale.reps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.durable", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=512, help=f"checkpoint size, in steps of {LAYER_MIB} (default 512)")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--workdir", type=Path, default=None, help="where the files go (default: the temp folder)")
    args = parser.parse_args(argv)
    tensors = workloads.checkpoint(max(1, args.mib // LAYER_MIB))
    with tempfile.TemporaryDirectory(prefix="lazystore-durable-", dir=args.workdir) as folder:
        for r in measure(tensors, Path(folder), args.reps)[:2]:
            print(f"{r.name}: {r.ours * 1e3:.0f} ms vs {r.anchor * 1e3:.0f} ms ({r.anchor_label}), ratio {r.ratio:.3f} "
                  f"(target <= {r.target.value}: {r.status}); {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
