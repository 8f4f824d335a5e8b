"""Deprecated names: each still works, as the very object it was renamed to,
and reading it warns, naming the replacement. lazystore itself never uses
them (pyproject's filterwarnings makes these warnings errors in the suite)."""

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import lazystore as ls
from lazystore import errors

ROOT = Path(__file__).resolve().parents[1]
DEPRECATED = {"InvalidIndexError": "InvalidSelectionError"}


@pytest.mark.parametrize("module", [ls, errors], ids=["lazystore", "lazystore.errors"])
@pytest.mark.parametrize("old, new", DEPRECATED.items())
def test_reading_a_deprecated_name_warns_naming_its_replacement(module, old, new):
    with pytest.warns(DeprecationWarning, match=rf"lazystore\.{old} is deprecated.*{new}") as caught:
        alias = getattr(module, old)
    assert alias is getattr(ls, new)
    assert caught[0].filename == __file__  # the warning points at the caller's line


def test_the_old_name_still_catches_the_error(tmp_path):
    ls.save({"w": __import__("numpy").zeros(3)}, tmp_path / "ck.lzy")
    with ls.open(tmp_path / "ck.lzy") as ck, pytest.warns(DeprecationWarning):
        try:
            ck.get_slice("w")[[0, 1]]
        except ls.InvalidIndexError as e:  # an except clause written before the rename
            assert isinstance(e, ls.InvalidSelectionError)
        else:
            pytest.fail("fancy indexing was not refused")


def test_from_import_of_a_deprecated_name_warns():
    with pytest.warns(DeprecationWarning, match="InvalidSelectionError"):
        from lazystore import InvalidIndexError
    assert InvalidIndexError is ls.InvalidSelectionError
    with pytest.warns(DeprecationWarning, match="InvalidSelectionError"):
        from lazystore.errors import InvalidIndexError as from_errors
    assert from_errors is ls.InvalidSelectionError


def test_unknown_names_are_still_attribute_errors():
    assert not hasattr(ls, "NoSuchError")
    with pytest.raises(AttributeError, match="NoSuchError"):
        errors.NoSuchError


def test_deprecated_names_are_not_exported():
    assert not set(DEPRECATED) & set(ls.__all__)  # star imports do not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from lazystore import *", {})


def test_the_package_and_its_tests_never_use_a_deprecated_name():
    where_named = {Path(__file__).resolve(), ROOT / "lazystore" / "errors.py"}  # the table and this test
    files = [ROOT / "README.md"] + [p for folder in ("lazystore", "tests", "benchmarks", "docs")
                                    for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")]
    users = [f"{path.relative_to(ROOT)}: {old}" for path in files if path.resolve() not in where_named
             for old in DEPRECATED if re.search(rf"\b{old}\b", path.read_text(errors="replace"))]
    assert not users, users


def test_the_suite_turns_lazystore_deprecations_into_errors(tmp_path):
    test = tmp_path / "test_old_name.py"
    test.write_text("import lazystore as ls\n\ndef test_it():\n    ls.InvalidIndexError\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                          str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(test)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "DeprecationWarning: lazystore.InvalidIndexError is deprecated" in run.stdout
