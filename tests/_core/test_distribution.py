"""The distribution name and the install hints (issue 25): ``lazystore`` on
the package index is an unrelated project, so every hint that tells a user
what to install names pyproject.toml's distribution, a checkout (``.``), or
the third-party packages themselves, and never the bare ``lazystore``."""

from __future__ import annotations

import importlib
import re
import sys

import numpy as np
import pytest

import lazystore as ls
from lazystore._core.distribution import DISTRIBUTION
from tests.paths import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
# The name on the index that belongs to someone else.
TAKEN = "lazystore"
# A "pip install" and the arguments after it: bare words or quoted ones.
PIP_INSTALL = re.compile(r"pip install((?: +(?:'[^']*'|\"[^\"]*\"|[\w.\-\[\],]+))+)")
TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|[\w.\-\[\],]+")
# Every text a user reads an install hint in.
TEXTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "lazystore").rglob("*.py"),
                *(REPO / "benchmarks").rglob("*.py")])


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(extra: str) -> set[str]:
    return {normal(re.match(r"[A-Za-z0-9_.\-]+", req).group()) for req in PROJECT["optional-dependencies"][extra]}


def install_targets(text: str) -> list[tuple[str, str | None]]:
    """(name, extra) of everything a ``pip install`` in ``text`` installs; options dropped."""
    out = []
    for m in PIP_INSTALL.finditer(text):
        for token in TOKEN.findall(m.group(1)):
            token = token.strip("'\"")
            if token.startswith("-"):
                continue
            name, _, extra = token.partition("[")
            out.append((name, extra.rstrip("]") or None))
    return out


def test_the_constant_is_pyprojects_distribution_name():
    assert PROJECT["name"] == DISTRIBUTION
    assert normal(DISTRIBUTION) != TAKEN
    # The import name and the command stay lazystore.
    assert PROJECT["scripts"]["lazystore"] == "lazystore.cli:main"


def test_no_hint_installs_the_taken_name_or_a_missing_extra():
    """README, docs, the package and the benchmarks: a lazystore install names
    the distribution or a checkout, with an extra pyproject.toml has."""
    extras = set(PROJECT["optional-dependencies"])
    bad = []
    for path in TEXTS:
        text = path.read_text()
        where = path.relative_to(REPO)
        # The extra spelled on the taken name, with or without "pip install" before it.
        bad += [f"{where}: {m.group()}" for m in re.finditer(r"(?<![\w.\-/])lazystore\[\w+\]", text)]
        for name, extra in install_targets(text):
            if normal(name) == TAKEN:
                bad.append(f"{where}: pip install {name}")
            if name in (".", DISTRIBUTION) and extra is not None and not set(extra.split(",")) <= extras:
                bad.append(f"{where}: no extra {extra!r} in pyproject.toml")
    assert not bad, bad


def test_the_package_spells_no_hint_of_its_own():
    """Every hint in lazystore/ comes from lazystore/_core/distribution.py."""
    spelled = [str(p.relative_to(REPO)) for p in (REPO / "lazystore").rglob("*.py")
               if "pip install" in p.read_text() and p.name != "distribution.py"]
    assert not spelled, spelled


def check_hint(message: str, extra: str) -> None:
    """The message names the extra's packages and the extra on the distribution."""
    targets = install_targets(message)
    assert (DISTRIBUTION, extra) in targets, message
    assert {normal(n) for n, e in targets if e is None} == requirement_names(extra), message


def test_missing_torch_names_the_torch_extra(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    path = tmp_path / "t.lzy"
    ls.save({"w": torch.zeros(2), "n": np.zeros(2)}, path)
    monkeypatch.setitem(sys.modules, "torch", None)  # as if not installed: "import torch" fails
    with pytest.raises(ls.MissingDependencyError) as exc:
        ls.load(path)
    check_hint(str(exc.value), "torch")


def test_missing_fsspec_names_the_remote_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ls.MissingDependencyError) as exc:
        ls.open("s3://bucket/ck.lzy")
    check_hint(str(exc.value), "remote")


def test_missing_lightning_names_the_lightning_extra(monkeypatch):
    # Its submodules too: one already imported (by the Lightning tests) is
    # found in sys.modules without its parent being looked at.
    for name in [m for m in sys.modules if m == "lightning" or m.startswith("lightning.")] + ["lightning"]:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [m for m in sys.modules if m == "lazystore.lightning" or m.startswith("lazystore.lightning.")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ls.MissingDependencyError) as exc:
        importlib.import_module("lazystore.lightning")
    check_hint(str(exc.value), "lightning")


def test_the_version_is_pyproject_s():
    from lazystore._core.distribution import VERSION

    assert ls.__version__ == VERSION == PROJECT["version"]
