"""Checkpoints the command-line tests run on: a flat model, nested training
state, and two parts to merge."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls


def make_tensors():
    rng = np.random.default_rng(0)
    return {
        "embed.weight": (rng.standard_normal((512, 64)) * 0.02).astype(np.float32),
        "layer0.bias": np.zeros(64, np.float32),
        "step": np.array(7, np.int64),
        "bf": rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16),
        "ids": (np.arange(20_000) % 7).astype(np.int64),
        "empty": np.zeros((0, 3), np.float64),
    }



@pytest.fixture
def tensors():
    return make_tensors()


@pytest.fixture
def model(tmp_path, tensors):
    path = tmp_path / "model.lzy"
    ls.save(tensors, path, compression="zstd", metadata={"model": "demo", "step": 1000})
    return path


@pytest.fixture
def nested(tmp_path):
    path = tmp_path / "nested.lzy"
    ls.save({"model": {"w": np.ones((2, 3), np.float32)}, "opt": [np.arange(4)], "epoch": 3, "best": float("inf")},
            path, metadata={"run": "x"})
    return path


@pytest.fixture
def parts(tmp_path):
    a = tmp_path / "a.lzy"
    b = tmp_path / "b.lzy"
    ls.save({"shared": np.zeros(4, np.float32), "only_a": np.arange(3)}, a, metadata={"k": "a", "from_a": 1})
    ls.save({"only_b": np.ones(2), "shared": np.ones(4, np.float32)}, b, compression="zstd",
            metadata={"k": "b", "from_b": 2})
    return a, b
