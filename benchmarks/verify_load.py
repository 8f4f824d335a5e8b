"""What checking on load costs: ``lazystore.torch.load_file`` of a raw file
(verify on, the default, and ``verify=False``) against
``safetensors.torch.load_file``, every page of every tensor touched, with
the page cache warm and cold.

A measure of the suite (registered in ``__main__``), and runnable alone at
full scale:

    python -m benchmarks.verify_load [--reps N] [--quick]

The file is the suite's 8 MiB-tensor file (64 float32 tensors: 512 MiB;
quick mode 64 MiB). "Cold" evicts both files from the page cache before
every call (``posix_fadvise(POSIX_FADV_DONTNEED)``, after the files were
made durable: only clean pages can be dropped), so each load reads the disk.
A fourth case is what the same guarantee costs a safetensors user:
``load_file``, then xxh3-64 of every tensor's bytes (a checksum kept beside
the file, as model-signing tools re-hash every file before use).

Warm, a lazystore load without checking reads nothing until touched (its
tensors are copy-on-write maps of the file), and touching one byte per page
is cheap; checking hashes every byte, so its floor is one xxh3 pass over
the file. Cold, every case reads the file from disk and the hash runs
behind the reads.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import xxhash

from . import anchors, report, workloads
from .measures import Result, size_label, timed
from .timing import compare
from .torch_api import _touch

CASES = ("verify on (default)", "verify=False", "safetensors", "safetensors + xxh3")




def _hashed(tensors: dict) -> dict:
    """Every tensor's xxh3-64, as a safetensors user checking a sidecar would."""
    import torch

    return {name: xxhash.xxh3_64_intdigest(t.reshape(-1).view(torch.uint8).numpy()) for name, t in tensors.items()}


def measure(ours: Path, theirs: Path, nbytes: int, reps: int) -> list[Result]:
    import safetensors.torch

    import lazystore.torch as lst

    cases = dict(zip(CASES, (
        lambda: _touch(lst.load_file(ours)),
        lambda: _touch(lst.load_file(ours, verify=False)),
        lambda: _touch(safetensors.torch.load_file(theirs)),
        lambda: _hashed(safetensors.torch.load_file(theirs)),
    )))
    first = {name: load() for name, load in cases.items() if name != "safetensors + xxh3"}
    assert len(set(first.values())) == 1, f"the loads read different bytes: {first}"
    for path in (ours, theirs):
        anchors.fsync_file(path)  # dirty pages cannot be evicted
    cold = compare(cases, reps=reps, setup=lambda: anchors.evict(ours, theirs))
    workloads.warm([ours, theirs])
    warm = compare(cases, reps=reps)
    size = size_label(nbytes)
    rows = []
    for state, t in (("warm", warm), ("cold", cold)):
        what = f"load_file of a {size} raw file, every page touched, page cache {state}"
        rows += [
            timed(f"verify_load_{state}", f"{what}: verify on vs safetensors", t, CASES[0], CASES[2],
                  nbytes=nbytes, group="verify"),
            timed(f"verify_load_{state}_off", f"{what}: verify on vs verify=False", t, CASES[0], CASES[1],
                  nbytes=nbytes, group="verify"),
            timed(f"verify_load_{state}_st_hashed", f"{what}: verify on vs safetensors + xxh3 of every tensor", t,
                  CASES[0], CASES[3], nbytes=nbytes, group="verify"),
            timed(f"verify_load_{state}_unchecked", f"{what}: verify=False vs safetensors", t, CASES[1],
                  CASES[2], nbytes=nbytes, group="verify"),
        ]
    return rows


def verify_load(ctx) -> list[Result]:
    f = ctx.files
    return measure(f.blocks["lzy"], f.blocks["safetensors"], f.blocks_nbytes, ctx.scale.reps)


MEASURES = (verify_load,)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.verify_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="the quick mode's 64 MiB file")
    args = parser.parse_args(argv)
    scale = workloads.QUICK if args.quick else workloads.FULL
    with tempfile.TemporaryDirectory(prefix="lazystore-verify-") as folder:
        tensors = workloads.blocks(scale.blocks)
        nbytes = workloads.nbytes(tensors)
        paths = workloads.lzy_and_safetensors(tensors, folder, "blocks")
        del tensors
        for r in measure(paths["lzy"], paths["safetensors"], nbytes, args.reps):
            print(report.ratio_line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
