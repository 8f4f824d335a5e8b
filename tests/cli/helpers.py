"""What the command-line tests share: running the command in-process
(main([...]) with capsys) or as a real ``python -m lazystore`` process, and
checks of its output and of the files it writes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from lazystore.cli import main
from tests.paths import REPO


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "lazystore", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=60, check=False, **kwargs)


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def assert_one_error_line(err: str):
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lazystore: error: "), err


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
