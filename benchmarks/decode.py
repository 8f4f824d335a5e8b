"""Decode speed on real weights: ls.load of compressed all-MiniLM-L6-v2.

A measure of the suite (registered in measures.MEASURES), and runnable alone
at full scale, since the whole suite takes long:

    python -m benchmarks.decode [--reps N]

The anchor is one zstd-3 frame of the same tensor bytes, decompressed in one
call: the 1 GiB zstd_load row measures synthetic noise-like weights, whose
planes are all stored raw, while real weights have zstd-coded exponent
planes and bf16's two planes, which this row covers.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path

import zstandard

from . import anchors, workloads
from .measures import Result, Target, size_label, timed
from .timing import compare, cpu_time

TARGET = 0.2  # issue 18: ls.load in at most 0.2x the time of plain zstd-3 decompression


def zstd3_frame(tensors: dict) -> bytes:
    """The anchor's input: one zstd-3 frame of the tensors' bytes back to back."""
    return zstandard.ZstdCompressor(level=3).compress(b"".join(v.tobytes() for v in tensors.values()))


def measure(tensors_by_variant: dict, folder: Path, reps: int) -> list[Result]:
    rows = []
    for variant, tensors in tensors_by_variant.items():
        n = workloads.nbytes(tensors)
        path = folder / f"decode-minilm-{variant}.lzy"
        anchors.ls_save(tensors, path, compression="zstd")
        blob = zstd3_frame(tensors)
        dctx = zstandard.ZstdDecompressor()
        cases = {"lazystore": partial(anchors.ls_load, path), "zstd-3 decompress": partial(dctx.decompress, blob)}
        t = compare(cases, reps=reps)
        cpu = {name: cpu_time(fn, reps=reps) for name, fn in cases.items()}
        what = f"all-MiniLM-L6-v2 {variant} ({len(tensors)} tensors, {size_label(n)})"
        rows.append(timed(f"minilm_load_{variant}", f"ls.load of zstd {what}", t, "lazystore", "zstd-3 decompress",
                          target=Target("<=", TARGET, "ratio"), nbytes=n,
                          note=f"anchor: one zstd-3 frame of the same bytes ({n / len(blob):.3f}x; "
                               f"lazystore's file {n / path.stat().st_size:.3f}x), one call; CPU time per call "
                               f"(all threads): {cpu['lazystore'] * 1e3:.1f} ms vs "
                               f"{cpu['zstd-3 decompress'] * 1e3:.1f} ms, "
                               f"{cpu['lazystore'] / cpu['zstd-3 decompress']:.2f}x"))
        path.unlink()
    return rows


def variants(limit: int | None) -> dict:
    weights = workloads.minilm(limit)
    return {"fp32": weights, "bf16": workloads.to_bfloat16(weights)}


def minilm_decode(ctx) -> list[Result]:
    return measure(variants(ctx.scale.minilm_tensors), ctx.files.folder, ctx.scale.reps)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=workloads.FULL.small_reps)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lazystore-decode-") as folder:
        for r in measure(variants(None), Path(folder), args.reps):
            print(f"{r.name}: {r.ours * 1e3:.1f} ms vs {r.anchor * 1e3:.1f} ms, ratio {r.ratio:.3f} "
                  f"(target <= {TARGET}: {r.status}; {r.gbps(r.ours):.2f} vs {r.gbps(r.anchor):.2f} GB/s) {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
