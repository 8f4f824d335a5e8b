"""Partial files (lazystore.sinks.partials): their names, and the clean-up
of those dead writers left.

A partial file nobody holds a lock on is a dead writer's: it is made here
by writing a file under a fresh partial name, as a writer killed before its
rename leaves it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import lazystore as ls
from lazystore.sinks import remove_stale_partials
from lazystore.sinks.partials import PARTIAL_NAME, partial_name
from tests.paths import REPO


def dead_partial(folder, target: str, name_max: int | None = None):
    path = folder / partial_name(target, name_max)
    path.write_bytes(b"\0" * 4096)
    return path


def test_remove_stale_partials_removes_dead_writers_files_only(tmp_path):
    ls.save({"x": np.ones(3)}, tmp_path / "keep.lzy")
    (tmp_path / ".hidden").write_text("not ours")
    with ls.Writer(tmp_path / "live.lzy") as live:
        live.add("x", np.zeros(10))
        dead = [dead_partial(tmp_path, "a.lzy"), dead_partial(tmp_path, "keep.lzy")]
        assert sorted(remove_stale_partials(tmp_path)) == sorted(dead)
        live.add("y", np.zeros(10))  # the live writer's partial file was left alone
    assert sorted(os.listdir(tmp_path)) == [".hidden", "keep.lzy", "live.lzy"]
    with ls.open(tmp_path / "live.lzy") as ck:
        assert list(ck) == ["x", "y"]


def test_a_dead_partial_with_a_cut_name_is_removed_by_the_next_save(tmp_path):
    name = "m" * 246 + ".lzy"
    dead = dead_partial(tmp_path, name, name_max=255)
    assert len(os.fsencode(dead.name)) == 255 and PARTIAL_NAME.fullmatch(dead.name)
    ls.save({"x": np.ones(3)}, tmp_path / name)
    assert os.listdir(tmp_path) == [name]


@pytest.mark.parametrize("name_max", [30, 255])
def test_partial_names_fit_and_stay_recognisable(name_max):
    for target in ["a.lzy", "x" * 300, "é" * 200, "ü" + "a" * 10]:
        name = partial_name(target, name_max)
        match = PARTIAL_NAME.fullmatch(name)
        assert match, name
        size = len(os.fsencode(name))
        assert size <= name_max, name
        # The target's name whole, or cut to use the room there is.
        kept = match["target"]
        assert target.startswith(kept) and (kept == target or size >= name_max - 1), name


def test_a_fifo_with_a_partial_files_name_is_never_opened(tmp_path):
    # A blocking open of a FIFO waits for a writer: a clean-up that opened it
    # would hang every save into the folder. A watcher opens the write end
    # only once someone is reading, which would both catch and unblock that.
    fifo = tmp_path / partial_name("ck.lzy")
    os.mkfifo(fifo)
    opened, done = [], threading.Event()

    def watch():
        while not done.wait(0.01):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # ENXIO: no reader
                continue
            opened.append(True)
            os.close(fd)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        ls.save({"x": np.ones(3)}, tmp_path / "ck.lzy")
        assert remove_stale_partials(tmp_path) == []
    finally:
        done.set()
        watcher.join()
    assert opened == [], "the clean-up opened a FIFO"
    assert sorted(os.listdir(tmp_path)) == sorted([fifo.name, "ck.lzy"])  # not ours to remove



@pytest.mark.slow
def test_a_save_stopped_by_sigterm_leaves_only_a_hidden_partial_until_the_next_clean_up(tmp_path):
    # SIGTERM's default action ends the process with no Python clean-up,
    # exactly like kill -9: what is left is one hidden, unlocked partial file.
    code = ("import sys, numpy as np, lazystore as ls\n"
            "w = ls.Writer(sys.argv[1])\n"
            "w.add('a', np.ones(1 << 20))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "ck.lzy")], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env=env) as child:
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=60) == -signal.SIGTERM
    (left,) = os.listdir(tmp_path)
    assert PARTIAL_NAME.fullmatch(left) and left.startswith(".ck.lzy.")
    assert remove_stale_partials(tmp_path) == [tmp_path / left]
    assert os.listdir(tmp_path) == []
