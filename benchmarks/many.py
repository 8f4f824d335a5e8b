"""The per-tensor cost: reading every tensor of a file of 100,000 tiny ones.

A measure of the suite (registered in measures.MEASURES), and runnable alone
at full scale, since the whole suite takes long:

    python -m benchmarks.many [--reps N]

MoE checkpoints hold 20,000-100,000 tensors, so what each tensor costs is
paid on every load. Two ways of reading them all, each against safetensors'
own (issue 18, target <= 0.5x for both):

- ``ls.load`` of the whole file against ``safetensors.numpy.load_file``;
- ``[ck[name] for name in ck]`` on an open file against a ``get_tensor``
  loop over ``safe_open(path, "np")``.

Arrays are released after each clock stops (see ``timing.compare``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path

from . import anchors, report, workloads
from .measures import Result, Target, timed
from .timing import compare

TARGET = 0.5


def measure(lzy: Path, safetensors: Path, count: int, reps: int) -> list[Result]:
    cases = {
        "ls.load": partial(anchors.ls_load, lzy),
        "safetensors load_file": partial(anchors.st_load, safetensors),
        "ck[name] each": partial(anchors.ls_read_each, lzy),
        "get_tensor each": partial(anchors.st_read_each, safetensors),
    }
    loaded = {name: len(read()) for name, read in cases.items()}
    assert set(loaded.values()) == {count}, f"the tools read different numbers of tensors: {loaded}"
    t = compare(cases, reps=reps)
    return [
        timed("load_many", f"load all of a {count:,}-tensor file", t, "ls.load", "safetensors load_file",
              target=Target("<=", TARGET, "ratio"), earlier="issue 18: 1.39 s vs 0.96 s (1.45x)"),
        timed("read_each_many", f"open a {count:,}-tensor file, read each tensor by name, close", t,
              "ck[name] each", "get_tensor each", target=Target("<=", TARGET, "ratio"),
              note="safetensors: safe_open(path, 'np') + get_tensor per name",
              earlier="issue 18: 1.04 s vs 0.80 s (1.30x)"),
    ]


def many_tensors(ctx) -> list[Result]:
    f = ctx.files
    return measure(f.tiny["lzy"], f.tiny["safetensors"], f.tiny_count, max(5, ctx.scale.small_reps // 3))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.many", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args(argv)
    count = workloads.FULL.tiny
    with tempfile.TemporaryDirectory(prefix="lazystore-many-") as folder:
        paths = workloads.lzy_and_safetensors(workloads.tiny(count), folder, "tiny")
        workloads.warm(list(paths.values()))
        for r in measure(paths["lzy"], paths["safetensors"], count, args.reps):
            print(f"{report.ratio_line(r)}; target <= {TARGET}: {r.status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
