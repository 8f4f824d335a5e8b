"""lazystore.torch against safetensors.torch, side by side (issue #15).

A bf16 checkpoint of ~256 MiB in 32 layers (quick mode: 16 MiB), written
by each library from the same tensors:

- ``load_file`` with every tensor touched (one byte read per 4 KiB page, so
  a lazily mapped load pays its page faults inside the clock);
- one layer of the 32 by ``keys=``, against safetensors loading the file and
  keeping that layer (it has no selection);
- the same ``load_file`` on copies of both files written alike (8 MiB
  writes): how each library's writer filled the page cache drops out, and
  what is left is the per-tensor work (informational);
- ``load_model`` into an existing module, whose parameters are copied into;
- with a CUDA GPU only: ``load_file(device="cuda:0")`` of a 1 GiB bf16 file,
  against safetensors' own, with torch's plain per-tensor ``.to("cuda")`` of
  lazystore's CPU tensors beside them (what lazystore did before its pinned
  staging buffers).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .measures import Context, Result, Target, size_label, timed
from .timing import compare
from .workloads import LAYER

LAYERS = 32  # of 8 MiB (quick mode: 0.5 MiB)
LAYER_PICKED = 7
GPU_LAYERS = 64  # 1 GiB of bf16 at full size


def _bf16_layers(layers: int, shrink: int, seed: int = 21) -> dict[str, np.ndarray]:
    """``layers`` layers of LAYER's tensors in bfloat16, each first dimension
    divided by ``shrink`` (a layer is 16 MiB / shrink)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(layers):
        for part, (rows, cols) in LAYER:
            shape = (rows // shrink, cols)
            out[f"layers.{i}.{part}"] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    return out


def _as_torch(arrays: dict) -> dict:
    import torch

    return {k: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for k, a in arrays.items()}


def _touch(tensors: dict) -> int:
    """Read one byte of every 4 KiB page of every tensor (CPU tensors)."""
    import torch

    total = 0
    for t in tensors.values():
        flat = t.reshape(-1).view(torch.uint8)
        total += int(flat[::4096].sum())
    return total


def _module(tensors: dict):
    """An nn.Module whose state_dict has ``tensors``' names and shapes."""
    import torch

    root = torch.nn.Module()
    for name, t in tensors.items():
        *path, leaf = name.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, torch.nn.Parameter(torch.empty_like(t), requires_grad=False))
    return root


def _write_both(tensors: dict, folder, stem: str) -> tuple:
    import safetensors.torch

    import lazystore.torch as lst

    ours, theirs = folder / f"{stem}.lzy", folder / f"{stem}.safetensors"
    lst.save_file(tensors, ours)
    safetensors.torch.save_file(tensors, theirs)
    return ours, theirs


def cpu(ctx: Context) -> list[Result]:
    import safetensors.torch

    import lazystore.torch as lst

    layers = LAYERS
    tensors = _as_torch(_bf16_layers(layers, shrink=2 if ctx.scale.mode == "full" else 32))
    n = sum(t.numel() * 2 for t in tensors.values())
    ours, theirs = _write_both(tensors, _folder(ctx), "bf16")
    ours_alike, theirs_alike = (_copy_alike(p) for p in (ours, theirs))
    pattern = f"layers.{LAYER_PICKED}.*"
    prefix = pattern[:-1]
    model_ours, model_theirs = _module(tensors), _module(tensors)
    del tensors

    def st_filtered():
        return {k: v for k, v in safetensors.torch.load_file(theirs).items() if k.startswith(prefix)}

    cases = {
        # The target rows compare like with like: safetensors checks nothing,
        # so lazystore runs with verify=False; the checked default's cost is
        # measured in benchmarks/verify_load.py ("checking on load").
        "lazystore.torch.load_file": lambda: _touch(lst.load_file(ours, verify=False)),
        "safetensors.torch.load_file": lambda: _touch(safetensors.torch.load_file(theirs)),
        "lazystore, copy": lambda: _touch(lst.load_file(ours_alike, verify=False)),
        "safetensors, copy": lambda: _touch(safetensors.torch.load_file(theirs_alike)),
        "lazystore keys=": lambda: _touch(lst.load_file(ours, keys=pattern, verify=False)),
        "safetensors, then filtered": lambda: _touch(st_filtered()),
        "lazystore.torch.load_model": lambda: lst.load_model(model_ours, ours, verify=False),
        "safetensors.torch.load_model": lambda: safetensors.torch.load_model(model_theirs, theirs),
    }
    picked = lst.load_file(ours, keys=pattern)
    reference = st_filtered()
    assert picked.keys() == reference.keys() and all(picked[k].equal(reference[k]) for k in picked)
    t = compare(cases, reps=ctx.scale.small_reps)
    size = size_label(n)
    first = f"layers.0.{LAYER[0][0]}"
    want = safetensors.torch.load_file(theirs)[first]
    for model in (model_ours, model_theirs):  # both loads must have read the same values
        assert model.state_dict()[first].equal(want)
    return [
        timed("torch_load_file",
              f"load_file(verify=False), {size} bf16 in {layers * len(LAYER)} tensors, every page touched", t,
              "lazystore.torch.load_file", "safetensors.torch.load_file", target=Target("<=", 1.0, "ratio"),
              nbytes=n, note="both map the file; what differs is the per-tensor work"),
        timed("ref_torch_load_file_alike", f"load_file as above, of copies of both files written alike ({size})", t,
              "lazystore, copy", "safetensors, copy", nbytes=n,
              note="the page cache filled the same way for both: the per-tensor work alone"),
        timed("torch_load_keys", f"load_file(keys=, verify=False) of 1 layer of {layers} ({size} file), touched", t,
              "lazystore keys=", "safetensors, then filtered", target=Target("<=", 0.3, "ratio"),
              note="safetensors has no selection: it loads the file and the layer is kept"),
        timed("torch_load_model", f"load_model(verify=False) into an existing module, {size} bf16", t,
              "lazystore.torch.load_model", "safetensors.torch.load_model", target=Target("<=", 0.9, "ratio"),
              nbytes=n, note="load_state_dict copies each tensor into the module's parameter"),
    ]


def _copy_alike(path, piece: int = 8 << 20):
    """A copy of ``path`` beside it, written in aligned pieces of ``piece``
    bytes: the page cache holds it in the same large folios whichever
    library wrote the original (see lazystore/sinks/local.py)."""
    copy = path.with_name("copy-" + path.name)
    with open(path, "rb") as src, open(copy, "wb", buffering=0) as dst:
        while block := src.read(piece):
            dst.write(block)
    return copy


def _folder(ctx: Context):
    folder = ctx.files.scratch("torch_api")
    folder.mkdir(exist_ok=True)
    return folder


def gpu(ctx: Context) -> list[Result]:
    """Loading straight to a CUDA device; no rows without one."""
    import torch

    if not torch.cuda.is_available():
        return []
    import safetensors.torch

    import lazystore.torch as lst

    layers = GPU_LAYERS if ctx.scale.mode == "full" else 4
    tensors = _as_torch(_bf16_layers(layers, shrink=1, seed=22))
    n = sum(t.numel() * 2 for t in tensors.values())
    ours, theirs = _write_both(tensors, _folder(ctx), "gpu")
    packed = _folder(ctx) / "gpu.zstd.lzy"
    lst.save_file(tensors, packed, compression="zstd")
    del tensors
    dev = torch.device("cuda:0")

    def synced(load):
        def run():
            out = load()
            torch.cuda.synchronize(dev)
            return out

        return run

    def pageable():  # per-tensor Tensor.to of the mapped CPU tensors: no staging
        return {k: v.to(dev) for k, v in lst.load_file(ours).items()}

    cases = {
        "lazystore, cuda:0": synced(lambda: lst.load_file(ours, device="cuda:0")),
        "safetensors, cuda:0": synced(lambda: safetensors.torch.load_file(theirs, device="cuda:0")),
        "lazystore zstd, cuda:0": synced(lambda: lst.load_file(packed, device="cuda:0")),
        "per-tensor .to(cuda)": synced(pageable),
    }
    got, want = cases["lazystore, cuda:0"](), cases["safetensors, cuda:0"]()
    assert got.keys() == want.keys() and all(got[k].equal(want[k]) for k in got), "the GPU loads differ"
    del got, want
    torch.cuda.empty_cache()
    t = compare(cases, reps=ctx.scale.reps)
    size = size_label(n)
    name = torch.cuda.get_device_name(dev)
    return [
        timed("torch_load_gpu", f"load_file(device='cuda:0'), {size} bf16 ({name})", t, "lazystore, cuda:0",
              "safetensors, cuda:0", nbytes=n, note="pinned staging buffers, copies overlapped with reading"),
        timed("ref_torch_load_gpu_zstd", f"the same from a zstd-compressed lazystore file, {size}", t,
              "lazystore zstd, cuda:0", "safetensors, cuda:0", nbytes=n),
        timed("ref_torch_load_gpu_pageable", f"lazystore's CPU tensors, then Tensor.to('cuda:0') each, {size}", t,
              "per-tensor .to(cuda)", "safetensors, cuda:0", nbytes=n),
    ]


MEASURES = (cpu, gpu)
