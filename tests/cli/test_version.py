"""``lazystore --version``: the version line, then whether the C kernels are
in use (an install without a compiler decodes more slowly)."""

from __future__ import annotations

import lazystore as ls
from lazystore.cli import main
from lazystore.codecs import compiled


def test_version_names_the_format_and_the_kernels(capsys):
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"lazystore {ls.__version__} (format {ls.FORMAT_VERSION})",
                     f"C kernels: {ls.show_config(mode='dicts')['C kernels']}"]


def test_version_says_when_the_kernels_are_missing(capsys, monkeypatch):
    monkeypatch.setattr(compiled, "kernels", None)
    monkeypatch.setattr(compiled, "import_error", "No module named 'lazystore.codecs._kernels'")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(
        "C kernels: not in use (No module named 'lazystore.codecs._kernels'); ")
