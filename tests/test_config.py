"""lazystore.show_config(): the versions this lazystore runs with, and
whether its optional C kernels are in use, from which file, or why not."""

from __future__ import annotations

import importlib
import sys
import types

import numpy as np
import pytest
import zstandard

import lazystore as ls
import lazystore.codecs
from lazystore.codecs import compiled

NAMES = ["lazystore", "format", "python", "numpy", "ml_dtypes", "zstandard", "xxhash", "numcodecs", "C kernels"]


def test_prints_one_line_per_component(capsys):
    assert ls.show_config() is None
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[0] for line in lines] == NAMES
    assert f"lazystore: {ls.__version__}" in lines
    assert f"format: {ls.FORMAT_VERSION}" in lines
    assert f"numpy: {np.__version__}" in lines


def test_dicts_mode_returns_what_it_prints(capsys):
    config = ls.show_config(mode="dicts")
    assert capsys.readouterr().out == ""
    assert list(config) == NAMES
    assert config["lazystore"] == ls.__version__
    assert config["zstandard"].startswith(f"{zstandard.__version__} (backend {zstandard.backend}, zstd ")


@pytest.mark.skipif(compiled.kernels is None, reason="the C kernels are not built here")
def test_names_the_kernels_file_in_use():
    line = ls.show_config(mode="dicts")["C kernels"]
    assert line == f"in use: {compiled.kernels.__file__}; {compiled.kernels.dispatch}"


def test_says_why_the_kernels_are_not_in_use(monkeypatch):
    monkeypatch.setattr(compiled, "kernels", None)
    monkeypatch.setattr(compiled, "import_error", "No module named 'lazystore.codecs._kernels'")
    assert ls.show_config(mode="dicts")["C kernels"] == (
        "not in use (No module named 'lazystore.codecs._kernels'); "
        "decoding through Blosc and numpy, slower, to the same bytes")
    monkeypatch.setattr(compiled, "import_error", None)  # built, and switched off (as the fallback's tests do)
    assert ls.show_config(mode="dicts")["C kernels"].startswith("not in use (switched off); ")


def test_a_stale_build_is_not_used(monkeypatch):
    # An editable install keeps the module it built in place; one built from
    # an older _kernels.c lacks the refusals the codecs now rely on.
    stale = types.ModuleType("lazystore.codecs._kernels")
    stale.__file__ = "/old/checkout/_kernels.so"
    monkeypatch.setitem(sys.modules, "lazystore.codecs._kernels", stale)
    monkeypatch.setattr(lazystore.codecs, "_kernels", stale, raising=False)  # what `import ... as` reads first
    try:
        importlib.reload(compiled)
        assert compiled.kernels is None
        assert compiled.import_error.startswith("/old/checkout/_kernels.so is a stale build (interface 1, ")
        assert "stale build" in ls.show_config(mode="dicts")["C kernels"]
    finally:
        monkeypatch.undo()
        importlib.reload(compiled)


def test_refuses_an_unknown_mode():
    with pytest.raises(ls.InvalidInputError, match="mode must be one of stdout, dicts, got 'json'"):
        ls.show_config(mode="json")
