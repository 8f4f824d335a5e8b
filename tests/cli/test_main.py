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
from tests.cli.helpers import assert_one_error_line, flip_byte, run, run_process
from tests.paths import REPO


def test_pyproject_declares_console_script():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"lazystore": "lazystore.cli:main"}


@pytest.mark.slow
def test_process_help_and_usage():
    r = run_process("--help")
    assert r.returncode == 0
    for command in ("info", "ls", "verify", "convert", "diff", "merge"):
        assert command in r.stdout
    r = run_process()
    assert r.returncode == 2 and "usage:" in r.stderr
    r = run_process("frobnicate", "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr


@pytest.mark.slow
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


@pytest.mark.slow
def test_process_diff_exit_codes_and_quiet_pipes(tmp_path, model, tensors):
    other = tmp_path / "other.lzy"
    r = run_process("convert", model, other, "--compression", "none")
    assert (r.returncode, r.stderr) == (0, "")  # no progress bar into a pipe
    r = run_process("diff", model, other)
    assert (r.returncode, r.stderr) == (0, "")
    ls.save({**tensors, "step": np.array(8, np.int64)}, other)
    r = run_process("diff", model, other)
    assert r.returncode == 1 and "~ step  values:" in r.stdout


@pytest.mark.slow
def test_process_info_json_and_errors(tmp_path, model):
    r = run_process("info", "--json", model)
    assert r.returncode == 0 and json.loads(r.stdout)["tensors"] == 6
    (tmp_path / "junk.lzy").write_bytes(os.urandom(300))
    for argv in (["info", tmp_path / "junk.lzy"], ["ls", tmp_path / "nope.lzy"], ["diff", model, tmp_path]):
        r = run_process(*argv)
        assert r.returncode == 2 and r.stdout == ""
        assert_one_error_line(r.stderr)


@pytest.mark.slow
def test_process_ls_into_a_closed_pipe(tmp_path):
    path = tmp_path / "many.lzy"
    ls.save({f"t{i:05d}": np.zeros(1, np.uint8) for i in range(5000)}, path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(f'"{sys.executable}" -m lazystore ls "{path}" | head -n 2', shell=True,
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.stdout.splitlines()[1].startswith("t00000")
    assert "Traceback" not in r.stderr and "Error" not in r.stderr


def _many_tensors(tmp_path):
    path = tmp_path / "many.lzy"
    ls.save({f"t{i:05d}": np.zeros(1, np.uint8) for i in range(5000)}, path)  # ~350 KB of `ls`, > a pipe's buffer
    return path


@pytest.mark.slow
def test_process_broken_pipe_exits_141_quietly(tmp_path):
    # The reader takes one line and goes away, as `| head -1` does: the
    # command stops with 128 + SIGPIPE (what a shell reports for a process
    # killed by SIGPIPE), distinct from 1 (no match, corrupt, different).
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "lazystore", "ls", str(_many_tensors(tmp_path))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline().startswith(b"NAME")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["dash", "dev-stdin-pipe"])
def test_process_refuses_a_checkpoint_on_a_pipe(tmp_path, model, how):
    data = model.read_bytes()
    path = "-" if how == "dash" else "/dev/stdin"
    r = subprocess.run([sys.executable, "-m", "lazystore", "ls", path], input=data, capture_output=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False)
    err = r.stderr.decode()
    assert r.returncode == 2 and r.stdout == b"" and "Invalid argument" not in err
    assert_one_error_line(err)
    assert err.startswith(f"lazystore: error: {path}: ") and "must be a file" in err


@pytest.mark.slow
def test_process_reads_dev_stdin_redirected_from_a_file(model):
    with open(model, "rb") as f:
        r = run_process("ls", "/dev/stdin", stdin=f)
    assert r.returncode == 0 and "embed.weight" in r.stdout


@pytest.mark.slow
def test_process_refuses_a_fifo_without_hanging(tmp_path):
    fifo = tmp_path / "fifo.lzy"
    try:
        os.mkfifo(fifo)
    except (OSError, AttributeError):
        pytest.skip("cannot make a FIFO here")
    r = run_process("verify", fifo)  # opening it plainly would wait for a writer forever
    assert r.returncode == 2 and "not a regular file" in r.stderr
    assert_one_error_line(r.stderr)


@pytest.mark.slow
def test_process_huge_max_shard_size_is_a_usage_error(tmp_path, model):
    r = run_process("convert", model, tmp_path / "out", "--max-shard-size", "9" * 400)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "larger than any file" in r.stderr and "9" * 100 not in r.stderr  # cut, not echoed whole
    assert not (tmp_path / "out").exists()


# Names and metadata a downloaded checkpoint may carry, meant for a terminal.
HOSTILE_NAMES = ["a\x1b[31mred", "t\x1b]0;owned\x07", "c\x9b2J", "evil\u202etxt", "cr\rx", "nl\nx", "z\u200b"]


def _printable(text: str) -> bool:
    return all(line.isprintable() for line in text.split("\n"))


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "h\x1b[2Jostile.lzy"  # the path itself too: it is echoed back
    ls.save({n: np.full(3, i, np.float32) for i, n in enumerate(HOSTILE_NAMES)}, path,
            metadata={"note\x1b[5m": "v\x9bx\u202e", "n": ["\x07"]})
    return path


@pytest.mark.slow
def test_every_output_escapes_control_characters(capsys, tmp_path, hostile):
    other = tmp_path / "other\x1b[0m.lzy"
    ls.save({n: np.full(3, 9, np.float32) for n in HOSTILE_NAMES[:3]}, other, metadata={"k\x1b": 1})
    with ls.open(hostile) as ck:
        offset = ck.info(HOSTILE_NAMES[0]).offset
    corrupt = tmp_path / "corrupt\x07.lzy"
    corrupt.write_bytes(hostile.read_bytes())
    flip_byte(corrupt, offset)
    runs = [["info", hostile], ["info", hostile, "--json"], ["ls", hostile], ["ls", hostile, "--json"],
            ["ls", hostile, "*\x1b[31m*"], ["verify", corrupt], ["diff", hostile, other],
            ["convert", hostile, tmp_path / "out\x1b[1m.lzy"], ["merge", tmp_path / "m\x07.lzy", hostile],
            ["info", tmp_path / "missing\x1b[31m.lzy"], ["ls", hostile, "nope\x9b"]]
    for argv in runs:
        code, out, err = run(capsys, *argv)
        assert _printable(out) and _printable(err), (argv, out, err)
        assert out or err
    code, out, _ = run(capsys, "ls", hostile, "--json")
    assert [t["name"] for t in json.loads(out)] == HOSTILE_NAMES  # escaped, yet the same strings
    code, out, _ = run(capsys, "info", hostile, "--json")
    assert json.loads(out)["metadata"] == {"note\x1b[5m": "v\x9bx\u202e", "n": ["\x07"]}
    code, out, _ = run(capsys, "ls", hostile)
    assert "a\\u001b[31mred" in out and "evil\\u202etxt" in out  # visible, not acted on
    header, *rows = out.splitlines()
    assert len(rows) == len(HOSTILE_NAMES)  # a newline in a name does not start a row of its own
    assert {r.index("float32") for r in rows} == {header.index("DTYPE")}  # aligned as printed
