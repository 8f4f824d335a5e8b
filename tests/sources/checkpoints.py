"""Checkpoints for the remote tests: tensors that compress, saved to bytes."""

from __future__ import annotations

import uuid

import numpy as np

import lazystore as ls

SHAPE = (256, 128)  # 128 KiB of float32: wider than the merge gap, so non-neighbours stay apart


def tensors(n: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    # Rounded values compress well, so zstd keeps every tensor compressed.
    return {f"layer.{i}.weight": np.round(rng.standard_normal(SHAPE), 1).astype(np.float32) for i in range(n)}


def file_bytes(tmp_path, arrays, **options) -> bytes:
    """The bytes of ``arrays`` saved with ``options``."""
    path = tmp_path / f"{uuid.uuid4().hex}.lzy"
    ls.save(arrays, path, **options)
    return path.read_bytes()
