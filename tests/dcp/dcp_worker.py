"""One rank of tests/dcp/test_dcp.py's 2-process run: gloo on 127.0.0.1, CPU only.

python tests/dcp/dcp_worker.py RANK PORT OUT_DIR

Saves the same DTensor state dict three ways (raw, zstd, dcp.async_save), loads
each back on the same 2 ranks (and the raw one resharded to other placements),
checks every value bit-exactly, and writes OUT_DIR/ok-RANK when all is well.
It also saves the state dict with torch's own FileSystemWriter (OUT_DIR/torch),
for tests/dcp/test_consolidate.py to consolidate.
"""

import os
import sys
import warnings
from pathlib import Path

import torch

SHAPES = {"model.w0": (67, 48), "model.w1": (40, 90), "model.bias": (300,), "model.emb": (33, 64)}
STEP = 42
EXTRA = {"lr": 0.001, "betas": [0.9, 0.95], "name": "adamw"}


def full_tensors() -> dict:
    """The full tensors, made the same way in every process."""
    g = torch.Generator().manual_seed(1234)
    out = {k: torch.randn(s, generator=g) for k, s in SHAPES.items()}
    out["model.emb"] = out["model.emb"].bfloat16()
    out["model.w1"] = out["model.w1"].bfloat16().float()  # compresses well under zstd
    return out


def bits(t):
    t = t.detach().contiguous()
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t.view(torch.int32)


def main(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    from lazystore.dcp import LazyStoreReader, LazyStoreWriter

    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=2, rank=rank)
    mesh = init_device_mesh("cpu", (2,))
    full = full_tensors()
    saved = {"model.w0": [Shard(0)], "model.w1": [Shard(1)], "model.bias": [Replicate()], "model.emb": [Shard(0)]}

    def state(placements, fill=None):
        sd = {k: distribute_tensor(full[k] if fill is None else torch.zeros_like(full[k]), mesh, placements[k])
              for k in SHAPES}
        sd["step"] = STEP if fill is None else 0
        sd["extra"] = dict(EXTRA) if fill is None else {"lr": 0.0, "betas": [0.0, 0.0], "name": ""}
        return sd

    sd = state(saved)
    dcp.save(sd, storage_writer=LazyStoreWriter(os.path.join(out, "raw")))
    dcp.save(sd, storage_writer=LazyStoreWriter(os.path.join(out, "zstd"), compression="zstd", chunk_bytes=1024))
    fut = dcp.async_save(sd, storage_writer=LazyStoreWriter(os.path.join(out, "async"), compression="zstd"))
    fut.result()
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(os.path.join(out, "torch")))

    def check(name, placements):
        target = state(placements, fill=0)
        # step and extra are non-tensor items, which DCP unpickles: our own checkpoint, so trusted
        dcp.load(target, storage_reader=LazyStoreReader(os.path.join(out, name), allow_pickle=True))
        for k in SHAPES:
            got = target[k]
            assert got.placements == tuple(placements[k]), (name, k, got.placements)
            assert torch.equal(bits(got.full_tensor()), bits(full[k])), (name, k)
            # each rank's local shard too, not only the gathered tensor
            want_local = distribute_tensor(full[k], mesh, placements[k]).to_local()
            assert torch.equal(bits(got.to_local()), bits(want_local)), (name, k, "local")
        assert target["step"] == STEP, (name, target["step"])
        assert target["extra"] == EXTRA, (name, target["extra"])

    for name in ("raw", "zstd", "async"):
        check(name, saved)
    resharded = {"model.w0": [Shard(1)], "model.w1": [Shard(0)], "model.bias": [Shard(0)], "model.emb": [Replicate()]}
    check("raw", resharded)
    check("zstd", resharded)

    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, f"ok-{rank}"), "w") as f:
        f.write("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
