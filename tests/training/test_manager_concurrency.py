"""One saver per folder, saves that never overlap, and the ends of a process
(issue #24, classes 4 and 11): two threads saving through one manager, two
processes racing for one folder, a checkpoint deleted under a restore, a
SIGTERM mid background save, and a background save asked for at exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.strategies import same_tree
from lazystore.training import reading as reading_module
from tests.paths import REPO

W = np.random.default_rng(8).standard_normal((32, 256)).astype(np.float32)


def state(step: int) -> dict:
    return {"w": (W * np.float32(1 + 1e-6 * step)).astype(np.float32), "step": step}


def run_child(code: str, *args, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's lazystore, not an installed one
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


# ---------------------------------------------------------------------------
# threads: saves through one manager never overlap
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_blocking_saves_from_two_threads_leave_every_step_restorable(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=4, keyframe_every=3)
    errors = []

    def saver(first: int) -> None:
        try:
            for step in range(first, 40, 2):
                mgr.save(step, state(step))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=saver, args=(first,)) for first in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(mgr.steps()) == 4 and mgr.damaged() == {}
    for step in mgr.steps():
        same_tree(state(step), mgr.restore(step))


# ---------------------------------------------------------------------------
# processes: one saving manager per folder
# ---------------------------------------------------------------------------


def test_a_second_saver_is_refused_at_once_until_the_first_closes(tmp_path):
    first = ls.CheckpointManager(tmp_path, keep_last=2)
    first.save(1, state(1))
    second = ls.CheckpointManager(tmp_path, keep_last=2)
    assert second.steps() == [1] and second.latest() == 1  # reading needs no lock
    same_tree(state(1), second.restore())
    with pytest.raises(ls.FolderLockedError, match="one saver per folder") as refused:
        second.save(2, state(2))
    assert isinstance(refused.value, BlockingIOError) and str(tmp_path) in str(refused.value)
    assert second.steps() == [1]  # nothing written
    first.close()
    second.save(2, state(2))  # the folder is free now
    with pytest.raises(ls.FolderLockedError):
        first.save(3, state(3))  # and held by the second
    del second, refused  # a manager that is garbage-collected lets go of the folder too (the error's traceback held it)
    first.save(3, state(3))
    assert first.steps() == [2, 3]


RACER = """
    import json, os, sys, numpy as np, lazystore as ls
    root, me, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    out = {"saved": 0, "refused": 0}
    for r in range(rounds):
        folder = os.path.join(root, f"f{r}")  # a fresh folder: its lock file is created in the race
        mgr = ls.CheckpointManager(folder, keep_last=2, delta=True, keyframe_every=3)
        try:
            for step in range(1, 5):
                mgr.save(step, {"w": np.full(64, me * 1000 + step, np.int64), "me": me})
                if step == 1:
                    with open(os.path.join(folder, "log"), "a") as log:
                        log.write(f"+{me}\\n")  # holds the folder from here ...
            with open(os.path.join(folder, "log"), "a") as log:
                log.write(f"-{me}\\n")  # ... to here (closed next)
            out["saved"] += 1
        except ls.FolderLockedError:
            out["refused"] += 1
        finally:
            mgr.close()
    print(json.dumps(out))
"""


@pytest.mark.slow
def test_two_processes_racing_for_one_folder_never_save_at_once(tmp_path):
    rounds = 40
    procs = [run_child(RACER, tmp_path, me, rounds) for me in (1, 2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err  # no error but the refusal, ever
        results.append(json.loads(out))
    assert sum(r["saved"] + r["refused"] for r in results) == 2 * rounds
    for r in range(rounds):
        folder = tmp_path / f"f{r}"
        events = (folder / "log").read_text().split() if (folder / "log").exists() else []
        holder = None
        for event in events:  # never two savers between a "+" and its "-"
            if event[0] == "+":
                assert holder is None, (r, events)
                holder = event[1:]
            else:
                assert holder == event[1:], (r, events)
                holder = None
        mgr = ls.CheckpointManager(folder)
        assert events and len(mgr.steps()) == 2 and mgr.damaged() == {}, (r, events)
        for step in mgr.steps():
            got = mgr.restore(step)
            assert got["w"][0] == got["me"] * 1000 + step and (got["w"] == got["w"][0]).all()
    print(f"two racing savers, {rounds} folders: {results}")


# ---------------------------------------------------------------------------
# the ends of things
# ---------------------------------------------------------------------------


def test_restore_of_a_step_deleted_meanwhile_is_checkpoint_not_found(tmp_path, monkeypatch):
    mgr = ls.CheckpointManager(tmp_path)
    mgr.save(1, state(1))
    real_load = reading_module.api.load

    def deleted_first(path, **kwargs):  # another process's retention got there between listing and reading
        os.remove(path)
        return real_load(path, **kwargs)

    monkeypatch.setattr(reading_module.api, "load", deleted_first)
    with pytest.raises(ls.CheckpointNotFoundError, match="deleted while it was being read"):
        mgr.restore(1)


SIGTERMED = """
    import os, signal, sys, threading, time, numpy as np, lazystore as ls
    folder = sys.argv[1]
    mgr = ls.CheckpointManager(folder, keep_last=2, compression="zstd")
    mgr.save(1, {"w": np.full(1 << 16, 1.0, np.float32), "step": 1})

    # Test scaffolding: the background save stops inside its fsync until SIGTERM has come.
    sigterm_seen = threading.Event()
    real_fsync = os.fsync
    def slow_fsync(fd):
        if threading.current_thread().name.startswith("lazystore-save") and not sigterm_seen.is_set():
            print("in flight", flush=True)
            sigterm_seen.wait()
        real_fsync(fd)
    os.fsync = slow_fsync

    # The recipe of docs/training.md: finish the save in flight, then exit.
    def on_sigterm(signum, frame):
        sigterm_seen.set()  # (scaffolding)
        mgr.close()         # waits for the background save: durable and listed
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_sigterm)

    mgr.save_async(2, {"w": np.full(1 << 16, 2.0, np.float32), "step": 2})
    while True:             # training goes on
        time.sleep(0.01)
"""


@pytest.mark.slow
def test_sigterm_mid_background_save_finishes_it_with_close(tmp_path):
    child = run_child(SIGTERMED, tmp_path)
    assert child.stdout.readline().strip() == "in flight", child.stderr.read()
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM, err
    mgr = ls.CheckpointManager(tmp_path)
    assert mgr.steps() == [1, 2] and mgr.damaged() == {}
    got = mgr.restore(2)
    assert got["step"] == 2 and (got["w"] == 2.0).all()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


SIGTERM_INSIDE_SAVE = """
    import os, signal, sys, numpy as np, lazystore as ls
    from lazystore.writing import background
    folder, where = sys.argv[1], sys.argv[2]
    mgr = ls.CheckpointManager(folder, keep_last=2)
    mgr.save(1, {"w": np.full(1 << 16, 1.0, np.float32)})

    def on_sigterm(signum, frame):  # the recipe of docs/training.md
        mgr.close()
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, on_sigterm)

    # Test scaffolding: SIGTERM arrives while the main thread is inside save(),
    # holding the saver: while it snapshots the state, or just after it
    # handed the save to the worker.
    saver = mgr._saver
    if where == "snapshot":
        real = background.snapshot
        def snapshot(*args):
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*args)
        background.snapshot = snapshot
    else:
        real = saver._submit
        def submit(*args):
            future = real(*args)
            os.kill(os.getpid(), signal.SIGTERM)
            return future
        saver._submit = submit
    mgr.save_async(2, {"w": np.full(1 << 16, 2.0, np.float32)})
    print("save returned", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("where, steps", [("snapshot", [1]), ("submitted", [1, 2])])
def test_sigterm_while_the_main_thread_is_inside_save_does_not_deadlock(tmp_path, where, steps):
    # close() from the handler used to wait on the saver's lock, held by the
    # very save call the signal interrupted: the process hung until SIGKILL.
    child = run_child(SIGTERM_INSIDE_SAVE, tmp_path, where)
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.kill()  # deadlocked: it would ignore SIGTERM
        child.communicate()
        raise
    assert child.returncode == 128 + signal.SIGTERM, err
    assert "save returned" not in out
    mgr = ls.CheckpointManager(tmp_path)
    assert mgr.steps() == steps and mgr.damaged() == {}  # a save already handed over ends durable
    assert (mgr.restore(steps[-1])["w"] == float(steps[-1])).all()
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]


AT_EXIT = """
    import atexit, sys, numpy as np, lazystore as ls
    mgr = ls.CheckpointManager(sys.argv[1])

    def save_at_exit():
        try:
            mgr.save_async(1, {"w": np.ones(4)})
        except ls.ShutdownError as exc:
            assert isinstance(exc, RuntimeError)
            print("refused:", exc)
        mgr.save(1, {"w": np.ones(4)})  # what the message says to do
        print("saved blocking")

    atexit.register(save_at_exit)
"""


@pytest.mark.slow
def test_a_background_save_at_exit_says_what_to_do(tmp_path):
    child = run_child(AT_EXIT, tmp_path)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert "refused:" in out and "save() there" in out and "saved blocking" in out, (out, err)
    assert ls.CheckpointManager(tmp_path).steps() == [1]
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".partial")]
