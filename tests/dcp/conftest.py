"""The 2-rank DCP run shared by tests/dcp: tests/dcp/dcp_worker.py on two
processes (gloo on 127.0.0.1, CPU), once per test session."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("dcp_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """The folder holding the worker's checkpoints: raw, zstd, async (lazystore's)
    and torch (FileSystemWriter's), each of the same 2-rank DTensor state dict."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("dcp2")
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(port), str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in (0, 1)]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for rank, (p, log) in enumerate(zip(procs, logs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    return out
