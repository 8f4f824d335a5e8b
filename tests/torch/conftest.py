"""Shared by the tests of lazystore.torch: torch is required (the whole
folder is skipped without it), and a scratch working folder for the tests
adapted from safetensors, which write to ./tests/data/."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("safetensors")


@pytest.fixture
def scratch_cwd(tmp_path, monkeypatch):
    (tmp_path / "tests" / "data").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path
