"""lazystore.cli.main: the entry point, exit codes and error lines through a real
``python -m lazystore`` process, and the console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lazystore as ls
from tests.cli.helpers import assert_one_error_line, flip_byte, run_process
from tests.paths import REPO


def test_pyproject_declares_console_script():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"lazystore": "lazystore.cli:main"}


def test_process_help_and_usage():
    r = run_process("--help")
    assert r.returncode == 0
    for command in ("info", "ls", "verify", "convert", "diff", "merge"):
        assert command in r.stdout
    r = run_process()
    assert r.returncode == 2 and "usage:" in r.stderr
    r = run_process("frobnicate", "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_process_verify_exit_codes(tmp_path, model):
    r = run_process("verify", model)
    assert (r.returncode, r.stderr) == (0, "")
    with ls.open(model) as ck:
        offset = ck.info("embed.weight").offset
    flip_byte(model, offset + 100)
    r = run_process("verify", model)
    assert r.returncode == 1 and r.stdout.splitlines()[0] == "corrupt: embed.weight"
    model.write_bytes(model.read_bytes()[:-7])
    r = run_process("verify", model)
    assert r.returncode == 2 and r.stdout == ""
    assert_one_error_line(r.stderr)


def test_process_diff_exit_codes_and_quiet_pipes(tmp_path, model, tensors):
    other = tmp_path / "other.lzy"
    r = run_process("convert", model, other, "--compression", "none")
    assert (r.returncode, r.stderr) == (0, "")  # no progress bar into a pipe
    r = run_process("diff", model, other)
    assert (r.returncode, r.stderr) == (0, "")
    ls.save({**tensors, "step": np.array(8, np.int64)}, other)
    r = run_process("diff", model, other)
    assert r.returncode == 1 and "~ step  values:" in r.stdout


def test_process_info_json_and_errors(tmp_path, model):
    r = run_process("info", "--json", model)
    assert r.returncode == 0 and json.loads(r.stdout)["tensors"] == 6
    (tmp_path / "junk.lzy").write_bytes(os.urandom(300))
    for argv in (["info", tmp_path / "junk.lzy"], ["ls", tmp_path / "nope.lzy"], ["diff", model, tmp_path]):
        r = run_process(*argv)
        assert r.returncode == 2 and r.stdout == ""
        assert_one_error_line(r.stderr)


def test_process_ls_into_a_closed_pipe(tmp_path):
    path = tmp_path / "many.lzy"
    ls.save({f"t{i:05d}": np.zeros(1, np.uint8) for i in range(5000)}, path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(f'"{sys.executable}" -m lazystore ls "{path}" | head -n 2', shell=True,
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.stdout.splitlines()[1].startswith("t00000")
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
