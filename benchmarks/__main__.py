"""python -m benchmarks [--quick | --big] [--out DIR] [--workdir DIR]

Measures lazystore side by side with safetensors, torch, numpy .npz, raw
zstandard / xxhash and plain memory and file operations, in one run. Prints
the table (stdout; progress goes to stderr) and writes benchmarks.json and
benchmarks.png to --out (default: docs/), updating the results section of
benchmarks.md there if it has one. Never fails on speed: MISS is reported,
not raised.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from . import background, big, delta, exponent, measures, report, torch_api, verify_load, workloads

DOCS = Path(__file__).resolve().parent.parent / "docs"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[1])
    parser.add_argument("--quick", action="store_true",
                        help="small workloads (64 MiB checkpoint, 10k-tensor file): a smoke run of every measure")
    parser.add_argument("--out", type=Path, default=DOCS, help="where the JSON, PNG and docs page go (default: docs/)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where to make the temporary folder for the files measured (default: the "
                             "system temp folder); it is deleted afterwards; full mode needs ~7 GiB free")
    parser.add_argument("--big", action="store_true",
                        help="only the bigger-than-memory run (benchmarks/big.py): a checkpoint of 1.3 x RAM "
                             "converted, verified and diffed; needs ~2.3 x RAM of free disk; not run in CI")
    args = parser.parse_args(argv)
    if args.big:
        return run_big(args)

    scale = workloads.QUICK if args.quick else workloads.FULL
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="lazystore-bench-", dir=args.workdir))
    results = []
    try:
        log(f"preparing the {scale.mode} workloads in {folder}")
        ctx = measures.Context(scale, *workloads.prepare(scale, folder, log))
        every = (measures.MEASURES + exponent.MEASURES + background.MEASURES + torch_api.MEASURES
                 + verify_load.MEASURES + delta.MEASURES)
        for i, measure in enumerate(every, 1):
            log(f"[{i}/{len(every)}] {measure.__module__.rsplit('.', 1)[-1]}.{measure.__name__}")
            t0 = time.perf_counter()
            results += measure(ctx)
            log(f"      {time.perf_counter() - t0:.1f} s")
        del ctx
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    # Targets first, in the order measured; then the informational rows.
    results.sort(key=lambda r: r.target is None)
    print(report.table(results))
    info = {
        "mode": scale.mode,
        "command": "python -m benchmarks" + (" --quick" if args.quick else ""),
        "seconds": time.perf_counter() - start,
        "scale": scale.as_dict(),
        "machine": report.machine(),
    }
    for path in report.write(results, info, args.out):
        log(f"wrote {path}")
    return 0


def run_big(args) -> int:
    start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="lazystore-big-", dir=args.workdir))
    try:
        results = big.run(folder, log)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(report.table(results))
    info = {"mode": "big", "command": "python -m benchmarks --big", "seconds": time.perf_counter() - start,
            "machine": report.machine()}
    info["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    for path in big.write(results, info, args.out):
        log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
