"""Big-model inference with most of the model on "disk": accelerate's
``load_checkpoint_and_dispatch`` through lazystore.hf (the disk modules read
from the lazystore file at each forward) against accelerate's own path
(a safetensors file, the disk modules copied into an offload folder first).

    python -m benchmarks.offload [--quick] [--forwards N] [--workdir DIR]

A randomly initialized Llama-style model built from a config (~1.1 GB of
float32 weights; --quick: ~30 MB), saved once as a raw lazystore file, a
zstd lazystore file and a safetensors file. Each case runs in a fresh
interpreter (started through a small launcher, so no RSS is inherited):
it builds the model on the meta device, loads it with
``device_map="auto"`` and ``max_memory={"cpu": a quarter of the model}``
(so most decoder layers go to "disk"), runs the forwards, and reports
its peak RSS (VmHWM), its RSS after imports, the load time and the time of
each forward. A last process loads the whole model in memory: the
reference the logits of every case must equal bit for bit.

Prints one JSON object (stdout) and a table (stderr). Never fails on speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .measures import _LAUNCHER

CASES = ("in memory", "lazystore raw", "lazystore zstd", "accelerate + offload folder")
FILES = {"in memory": "model.lzy", "lazystore raw": "model.lzy", "lazystore zstd": "model-zstd.lzy",
         "accelerate + offload folder": "model.safetensors"}
# Share of the model's bytes the CPU may hold: the rest goes to "disk".
CPU_SHARE = 0.25


def config(quick: bool):
    import transformers

    if quick:
        return transformers.LlamaConfig(hidden_size=256, intermediate_size=704, num_hidden_layers=8,
                                        num_attention_heads=4, num_key_value_heads=4, vocab_size=2000,
                                        tie_word_embeddings=False)
    return transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=16,
                                    num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                                    tie_word_embeddings=False)


def build(folder: Path, quick: bool) -> int:
    """Save the random model three ways into ``folder``; its size in bytes."""
    import safetensors.torch
    import torch
    import transformers

    from lazystore.torch import save_file

    torch.manual_seed(0)
    cfg = config(quick)
    model = transformers.LlamaForCausalLM(cfg)
    state = {n: t.detach().contiguous() for n, t in model.state_dict().items()}
    cfg.to_json_file(folder / "config.json")
    save_file(state, folder / FILES["lazystore raw"])
    save_file(state, folder / FILES["lazystore zstd"], compression="zstd")
    safetensors.torch.save_file(state, folder / FILES["accelerate + offload folder"], metadata={"format": "pt"})
    return sum(t.nbytes for t in state.values())


def child(case: str, folder: Path, forwards: int, budget: int, threads: int) -> dict:
    """One case, in this (fresh) process."""
    import accelerate
    import numpy as np
    import torch
    import transformers

    from lazystore.hf import big_model

    if threads:
        torch.set_num_threads(threads)
    cfg = transformers.LlamaConfig.from_json_file(folder / "config.json")
    ids = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    with accelerate.init_empty_weights():
        model = transformers.LlamaForCausalLM(cfg).eval()
    baseline = _status("VmRSS")
    path = folder / FILES[case]
    start = time.perf_counter()
    if case == "in memory":
        from lazystore.torch import load_file

        model.load_state_dict(load_file(path), assign=True)
    else:
        load = accelerate.load_checkpoint_and_dispatch if case.startswith("accelerate") else \
            big_model.load_checkpoint_and_dispatch
        offload = folder / "offload"
        shutil.rmtree(offload, ignore_errors=True)
        model = load(model, str(path), device_map="auto", max_memory={"cpu": budget},
                     no_split_module_classes=["LlamaDecoderLayer"], offload_folder=offload)
    loaded = time.perf_counter() - start
    times = []
    for _ in range(forwards):
        start = time.perf_counter()
        with torch.no_grad():
            logits = model(ids).logits
        times.append(time.perf_counter() - start)
    np.save(folder / f"logits-{case.replace(' ', '_')}.npy", logits.numpy())
    disk = [m for m, d in getattr(model, "hf_device_map", {}).items() if d == "disk"]
    on_disk = sum(p.numel() * p.element_size() for n, p in model.named_parameters()
                  if any(n == m or n.startswith(m + ".") for m in disk))
    return {"case": case, "baseline_mib": baseline, "peak_mib": _status("VmHWM"), "load_s": loaded,
            "forward_s": times, "disk_mib": on_disk / 2**20,
            "offload_folder_mib": _tree_mib(folder / "offload"),
            "torch_threads": torch.get_num_threads()}


def _status(key: str) -> float:
    """A /proc/self/status figure, in MiB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))


def _tree_mib(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20 if folder.exists() else 0.0


def run_case(case: str, folder: Path, forwards: int, budget: int, threads: int) -> dict:
    cmd = [sys.executable, "-c", _LAUNCHER, sys.executable, "-m", "benchmarks.offload", "--child", case,
           "--folder", str(folder), "--forwards", str(forwards), "--budget", str(budget),
           "--threads", str(threads)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.offload", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a ~30 MB model: a smoke run")
    parser.add_argument("--forwards", type=int, default=3, help="forwards per case (default 3)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the temporary folder goes")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch's intra-op threads in each case (default: torch's own choice). On a small "
                             "shared machine, torch's spinning OpenMP threads and lazystore's reader threads "
                             "compete for the cores: compare 1 with the default")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--budget", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.folder, args.forwards, args.budget, args.threads)))
        return 0
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="lazystore-offload-", dir=args.workdir) as tmp:
        folder = Path(tmp)
        size = build(folder, args.quick)
        budget = int(size * CPU_SHARE)
        rows = [run_case(case, folder, args.forwards, budget, args.threads) for case in CASES]
        reference = np.load(folder / "logits-in_memory.npy")
        for row in rows:
            logits = np.load(folder / f"logits-{row['case'].replace(' ', '_')}.npy")
            row["bit_identical"] = bool(np.array_equal(logits.view(np.uint32), reference.view(np.uint32)))
        result = {"model_mib": size / 2**20, "cpu_budget_mib": budget / 2**20, "cpus": os.cpu_count(),
                  "cases": rows}
    print(json.dumps(result, indent=1))
    print(f"model {size / 2**20:.0f} MiB, max_memory cpu {budget / 2**20:.0f} MiB, {os.cpu_count()} CPUs, "
          f"torch threads {rows[0]['torch_threads']}",
          file=sys.stderr)
    print(f"{'case':30} {'peak RSS':>9} {'after imports':>13} {'load':>7} {'forward (min)':>13} {'on disk':>8}  same",
          file=sys.stderr)
    for r in rows:
        print(f"{r['case']:30} {r['peak_mib']:7.0f}Mi {r['baseline_mib']:11.0f}Mi {r['load_s']:6.2f}s "
              f"{min(r['forward_s']):12.3f}s {r['disk_mib']:6.0f}Mi  {r['bit_identical']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
