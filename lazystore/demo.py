"""The main job in one run: write a checkpoint, open it, read one layer
lazily, verify it.  ``python -m lazystore.demo [folder]``"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import lazystore as ls


def fake_model(layers: int = 12, width: int = 512, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights shaped like a small transformer's (values are random)."""
    rng = np.random.default_rng(seed)
    tensors = {"embed.weight": rng.standard_normal((8000, width), dtype=np.float32) * 0.02}
    for i in range(layers):
        p = f"layers.{i}"
        tensors[f"{p}.attn.qkv.weight"] = rng.standard_normal((3 * width, width), dtype=np.float32) * 0.02
        tensors[f"{p}.mlp.up.weight"] = rng.standard_normal((4 * width, width), dtype=np.float32) * 0.02
        tensors[f"{p}.mlp.down.weight"] = rng.standard_normal((width, 4 * width), dtype=np.float32) * 0.02
        tensors[f"{p}.norm.weight"] = np.ones(width, dtype=np.float32)
    return tensors


def main(folder: Path) -> int:
    tensors = fake_model()
    total = sum(t.nbytes for t in tensors.values())
    path = folder / "demo.lzy"

    t0 = time.perf_counter()
    ls.save(tensors, path, compression="auto", metadata={"model": "demo", "step": 1000})
    print(f"saved {len(tensors)} tensors, {total / 2**20:.1f} MiB -> {path.stat().st_size / 2**20:.1f} MiB "
          f"on disk (auto) in {time.perf_counter() - t0:.2f} s")

    t0 = time.perf_counter()
    with ls.open(path) as ck:
        opened = time.perf_counter() - t0
        print(f"opened in {opened * 1e3:.2f} ms (index only): {len(ck)} tensors, metadata {ck.metadata}")
        info = ck.info("layers.5.mlp.up.weight")
        print(f"layers.5.mlp.up.weight: {info.dtype} {info.shape}, {info.stored_nbytes} of {info.nbytes} bytes stored")

        rows = ck.get_slice("layers.5.mlp.up.weight")[:16]  # decodes only the chunk holding these rows
        assert np.array_equal(rows, tensors["layers.5.mlp.up.weight"][:16])
        print(f"read rows 0-15 of one layer lazily: {rows.shape}, checks out against the original")

        layer = ck.select("layers.5.*")
        assert all(np.array_equal(layer[k], tensors[k]) for k in layer)
        print(f"read layer 5 ({len(layer)} tensors) without touching the rest")

        t0 = time.perf_counter()
        bad = ck.verify()
        outcome = "intact" if not bad else f"CORRUPT: {bad}"
        print(f"verify: {outcome} ({time.perf_counter() - t0:.2f} s, every chunk checksummed)")
    return 0 if not bad else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        raise SystemExit(main(Path(sys.argv[1])))
    with tempfile.TemporaryDirectory() as tmp:
        raise SystemExit(main(Path(tmp)))
