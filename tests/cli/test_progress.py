"""lazystore.cli.progress: a bar on stderr only on a terminal, and only with
tqdm or rich installed."""

from __future__ import annotations

import pytest

from lazystore.cli import progress
from tests.cli.helpers import run


def test_progress_only_on_a_terminal(capsys, monkeypatch, tmp_path, model):
    pytest.importorskip("tqdm")
    assert run(capsys, "convert", model, tmp_path / "a.lzy")[2] == ""  # capsys: not a terminal
    monkeypatch.setattr(progress, "_stderr_is_tty", lambda: True)
    code, out, err = run(capsys, "convert", model, tmp_path / "b.lzy")
    assert code == 0 and "convert" in err and "%" in err
    assert "%" not in out


def test_progress_without_bar_libraries(capsys, monkeypatch, tmp_path, model):
    monkeypatch.setattr(progress, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(progress, "_make_bar", lambda *a: None)
    code, _, err = run(capsys, "verify", model)
    assert code == 0 and err == ""


def test_progress_helper_counts_weights(monkeypatch):
    updates = []

    class Bar:
        def update(self, n):
            updates.append(n)

        def close(self):
            updates.append("closed")

    monkeypatch.setattr(progress, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(progress, "_make_bar", lambda *a: Bar())
    assert list(progress.progress([1, 2, 3], desc="x", total=6, weight=lambda i: i * 10)) == [1, 2, 3]
    assert updates == [10, 20, 30, "closed"]
