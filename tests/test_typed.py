"""PEP 561: lazystore ships ``py.typed``, so type checkers read its
annotations. The marker must be in the package, and in what setuptools
builds from it (an installed copy is a built one)."""

import importlib.resources
import shutil
import subprocess
import sys

import pytest

from tests.paths import REPO as ROOT


def test_the_package_carries_the_marker():
    marker = importlib.resources.files("lazystore") / "py.typed"
    assert marker.is_file()


def test_the_marker_is_package_data():
    # setuptools >= 69 adds py.typed by itself; the build-system allows 68.
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["lazystore"]


def test_a_build_of_the_package_holds_the_marker(tmp_path):
    # build_py copies what an install would: the modules and their package data.
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, tmp_path)
    shutil.copytree(ROOT / "lazystore", tmp_path / "lazystore", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    run = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", "out"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "lazystore" / "py.typed").is_file()
    assert (tmp_path / "out" / "lazystore" / "api" / "saving.py").is_file()  # subpackages too
