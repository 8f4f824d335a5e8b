"""What the kill -9 tests share: run a saving child and SIGKILL it at a
random moment, and read which single version a checkpoint holds."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time


def run_and_kill(saver: str, args: list[str], rng: random.Random, *, longest: float) -> None:
    """Start ``python -c saver *args``, wait for it to print "ready", let it
    save for a random time up to ``longest`` seconds, then SIGKILL it."""
    proc = subprocess.Popen([sys.executable, "-c", saver, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, longest))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)


def one_version(ck) -> int:
    """The version every tensor of the checkpoint holds (each tensor is
    filled with its save's version number); fails on a mix."""
    values = set()
    for name in ck:
        arr = ck[name]
        assert (arr == arr.flat[0]).all(), f"{name} mixes versions"
        values.add(float(arr.flat[0]))
    assert len(values) == 1, f"tensors from several versions: {values}"
    return int(values.pop())
