"""``python -m benchmarks --big``: a checkpoint larger than memory.

Writes a safetensors file of ``BIG_FACTOR`` x the machine's RAM (one tensor
alone larger than RAM, plus a few ordinary ones), then runs, each in a
process of its own so its peak memory is its own:

- ``lazystore convert big.safetensors big.lzy --compression zstd``
- ``lazystore verify big.lzy``
- ``lazystore diff big.safetensors big.lzy`` (every value compared)

and reports each one's time, throughput and peak RSS, beside the anchor of
reading the source file once (the floor of any of them). Target: peak RSS
under 1 GiB for each. Not run in CI: it needs ~2.3 x RAM of free disk and
several minutes.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import report
from .measures import Result, Target, size_label

BIG_FACTOR = 1.3
RSS_TARGET = 1 << 30
BLOCK = 64 << 20  # bytes the generator and the read anchor handle at a time

# Run one lazystore command and print its own peak RSS: VmHWM, the peak of
# this process's memory since exec (ru_maxrss would carry over the peak of
# the parent that forked it).
CHILD = (
    "import sys\n"
    "from lazystore.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "hwm = next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))\n"
    "print('PEAK_KIB', hwm, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def ram_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def write_safetensors(path: Path, total: int, log) -> dict[str, tuple[int, ...]]:
    """A safetensors file of about ``total`` bytes of float32, written a
    block at a time: one tensor of 0.8 x total (larger than RAM when total
    is 1.3 x RAM), the rest in 8 equal tensors. Values are noisy floats of
    a trained model's scale, varied per block so no two blocks repeat."""
    row = 16384 * 4  # bytes per row of 16384 float32
    big_rows = int(total * 0.8) // row
    small_rows = (total - big_rows * row) // 8 // row
    shapes = {"big.weight": (big_rows, 16384), **{f"layer{i}.weight": (small_rows, 16384) for i in range(8)}}
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = shape[0] * shape[1] * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    base = (rng.standard_normal(BLOCK // 4) * 0.02).astype(np.float32)
    start = time.perf_counter()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        written, k = 0, 0
        while written < offset:
            n = min(BLOCK, offset - written)
            block = base[: n // 4] * np.float32(1 + (k % 1000) * 1e-3)
            f.write(block.tobytes())
            written += n
            k += 1
    log(f"      wrote {offset / 2**30:.1f} GiB of safetensors in {time.perf_counter() - start:.0f} s")
    return shapes


def read_once(path: Path) -> float:
    """Seconds to read the whole file once, a block at a time (the anchor)."""
    buf = bytearray(BLOCK)
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return time.perf_counter() - start


def run_cli(args: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of one lazystore command in a fresh process."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"lazystore {' '.join(args)} failed: {proc.stderr[-2000:]}")
    peak = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_KIB"))
    return elapsed, peak * 1024


BEGIN_BIG = "<!-- BEGIN BIG RESULTS (written by python -m benchmarks --big) -->"
END_BIG = "<!-- END BIG RESULTS -->"


def write(results: list[Result], info: dict, out: Path) -> list[Path]:
    """benchmarks_big.json in ``out``, and the big section of
    ``out/benchmarks.md`` (the main results are left as they are)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "benchmarks_big.json"]
    written[0].write_text(json.dumps(report.as_json(results, info), indent=2) + "\n")
    m = info["machine"]
    section = "\n".join([
        BEGIN_BIG, "",
        f"Run {info['created']} ({info['seconds']:.0f} s): `{info['command']}`; {m['cores']} cores, "
        f"{m['ram_gib']} GiB RAM; lazystore commit {m['git_commit'] or 'unknown'}.", "",
        report.table(results).rstrip(), "", END_BIG,
    ])
    if report.update_doc(out / "benchmarks.md", section, BEGIN_BIG, END_BIG):
        written.append(out / "benchmarks.md")
    return written


def run(folder: Path, log) -> list[Result]:
    ram = ram_bytes()
    src, dst = folder / "big.safetensors", folder / "big.lzy"
    log(f"      RAM {ram / 2**30:.1f} GiB: writing a {BIG_FACTOR} x RAM checkpoint")
    write_safetensors(src, int(ram * BIG_FACTOR), log)
    size = os.path.getsize(src)
    results = []
    anchor = read_once(src)
    log(f"      read once: {anchor:.0f} s")
    results.append(Result("big_read", f"reading the {size_label(size)} source once (the anchor)", anchor, None,
                          "s", None, None, "time", nbytes=size, group="big"))
    for key, label, args, nbytes in (
        ("convert", "lazystore convert to zstd", ["convert", str(src), str(dst), "--compression", "zstd"], size),
        ("verify", "lazystore verify", ["verify", str(dst)], None),
        ("diff", "lazystore diff (every value)", ["diff", str(src), str(dst)], size),
    ):
        seconds, peak = run_cli(args)
        moved = nbytes if nbytes is not None else os.path.getsize(dst)
        log(f"      {label}: {seconds:.0f} s, {moved / seconds / 1e9:.2f} GB/s, peak RSS {peak / 2**20:.0f} MiB")
        what = f"{label} of a {size_label(size)} safetensors checkpoint ({BIG_FACTOR} x RAM)"
        results.append(Result(f"big_{key}", what, seconds, anchor, "s", seconds / anchor, None, "time",
                              anchor_label="reading the source once", nbytes=moved, group="big"))
        results.append(Result(f"big_{key}_rss", f"peak RSS, {label}", peak / 2**20, None, "MiB", None,
                              Target("<", RSS_TARGET / 2**20, "ours"), "memory", group="big",
                              note="fresh process, VmHWM"))
    results.append(Result("big_size", "lazystore zstd size / safetensors size", os.path.getsize(dst) / size,
                          None, "x", None, None, "size", group="big"))
    return results
