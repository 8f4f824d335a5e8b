"""Background saves (``save_async``): snapshot semantics, one save in
flight, errors never swallowed, readers see only durable checkpoints, buffers
reused.

To make the timing deterministic, ``gate`` holds the worker inside the
write (before it starts, or after the file is renamed into place) until the
test lets it go: what the test does meanwhile is what a training loop does
while a save runs in the background."""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import wait as wait_all

import numpy as np
import pytest
import torch

import lazystore as ls
from lazystore.testing.faults import SyscallFaults
from lazystore.testing.strategies import same_tree
from lazystore.training.saver_lock import LOCK_NAME
from lazystore.writing import background
from lazystore.writing.background import SaveFuture


def state(step: int) -> dict:
    return {
        "model": OrderedDict(w=torch.full((64, 32), float(step)), b=torch.arange(8, dtype=torch.bfloat16) + step),
        "opt": {"moments": [np.full(100, step, np.float64)], "lr": 0.1 * step},
        "losses": [float(step)],
        "step": step,
    }


def mutate(s: dict) -> None:
    """What a training step does to the state, in place, containers included."""
    s["model"]["w"].add_(1000)
    s["model"]["b"].add_(1000)
    s["opt"]["moments"][0][:] = -1
    s["opt"]["lr"] = 99.0
    s["losses"].append(123.0)
    s["step"] += 1000


class Gate:
    """Wraps background.write_prepared (the write, on the worker) so it waits for ``open()``:
    ``where="before"`` the write starts, ``"after"`` the file is renamed into
    place (and before the manager's retention and bookkeeping)."""

    def __init__(self, where: str):
        self.where, self.entered, self.release = where, threading.Event(), threading.Event()
        self.seen: list[dict] = []  # the leaves each write got

    def __call__(self, real):
        def fill(w, prepared, *args, **kwargs):
            self.seen.append(dict(prepared.leaves))
            if self.where == "before":
                self.hold()
            result = real(w, prepared, *args, **kwargs)
            if self.where == "after":
                self.hold()
            return result
        return fill

    def hold(self) -> None:
        self.entered.set()
        assert self.release.wait(30)

    def open(self) -> None:
        self.release.set()


@pytest.fixture
def gate(monkeypatch):
    def make(where="before") -> Gate:
        g = Gate(where)
        monkeypatch.setattr(background, "write_prepared", g(background.write_prepared))
        return g
    return make


# -- snapshot semantics ---------------------------------------------------------------


def test_state_changed_right_after_save_returns_is_saved_as_it_was(tmp_path, gate):
    g = gate("before")
    with ls.CheckpointManager(tmp_path) as mgr:
        s = state(1)
        future = mgr.save_async(1, s, metrics={"loss": 0.5})
        assert isinstance(future, Future) and not future.done()
        mutate(s)  # the write has not started: only a snapshot can keep the old values
        g.open()
        assert future.result(timeout=60) == mgr.path(1)
        assert future.done()
        same_tree(state(1), mgr.restore(1))
        assert mgr.metrics(1) == {"loss": 0.5}


def test_ls_save_in_the_background_saves_the_state_as_it_was(tmp_path, gate):
    g = gate("before")
    s = state(2)
    future = ls.save_async(s, tmp_path / "ck.lzy", compression="zstd", metadata={"run": "a"})
    mutate(s)
    g.open()
    assert future.result(timeout=60) == tmp_path / "ck.lzy"
    same_tree(state(2), ls.load(tmp_path / "ck.lzy"))
    with ls.open(tmp_path / "ck.lzy") as ck:
        assert ck.metadata == {"run": "a"} and ck.verify() == []


def test_flat_mappings_and_views_are_snapshotted_too(tmp_path, gate):
    g = gate("before")
    flat = {"a": np.arange(10, dtype=">i4"), "b": np.float32(3), "c": np.ones((3, 4))[:, ::2]}
    expected = {k: np.array(v) for k, v in flat.items()}
    future = ls.save_async(flat, tmp_path / "flat.lzy")
    flat["a"][:] = 0
    flat["c"][:] = 0
    g.open()
    future.result(timeout=60)
    loaded = ls.load(tmp_path / "flat.lzy")
    assert list(loaded) == ["a", "b", "c"]
    for k, v in expected.items():
        assert np.array_equal(loaded[k], v) and loaded[k].dtype == v.dtype.newbyteorder("<")
    # An open checkpoint is a flat mapping too: copied while it is open.
    with ls.open(tmp_path / "flat.lzy") as ck:
        copy = ls.save_async(ck, tmp_path / "copy.lzy")
    copy.result(timeout=60)
    assert ls.load(tmp_path / "copy.lzy").keys() == expected.keys()


def test_a_blocking_save_writes_the_callers_own_tensors(tmp_path, gate):
    g = gate("before")
    g.open()
    s = {"w": np.arange(5.0)}
    assert ls.save(s, tmp_path / "x.lzy") is None  # blocking: as before
    assert g.seen[0]["w"] is s["w"]  # no copy when nothing runs in the background


# -- bad input raises at once ------------------------------------------------------------


@pytest.mark.parametrize("bad", [
    {"x": {1, 2}},                                   # a set
    {"x": [np.zeros(3, dtype=object)]},              # an unstorable dtype, nested
    {"x": np.zeros(3, dtype=object)},                # ... in a flat mapping
    {"x": np.zeros(2), 3.5: np.zeros(2)},            # a float key
    {"a\0b": np.zeros(2)},                           # a NUL in a name
])
def test_bad_state_raises_at_call_time_and_nothing_is_written(tmp_path, bad):
    mgr = ls.CheckpointManager(tmp_path / "m")
    with pytest.raises(ls.InvalidInputError):
        mgr.save_async(1, bad)
    with pytest.raises(ls.InvalidInputError):
        ls.save_async(bad, tmp_path / "x.lzy")
    mgr.wait()
    assert os.listdir(tmp_path / "m") == [] and not (tmp_path / "x.lzy").exists()


def test_bad_options_raise_at_call_time(tmp_path):
    s = {"w": np.zeros(3)}
    with pytest.raises(ls.InvalidInputError, match="metadata"):
        ls.save_async(s, tmp_path / "x.lzy", metadata={"bad": float("nan")})
    with pytest.raises(ls.InvalidInputError, match="alignment"):
        ls.save_async(s, tmp_path / "x.lzy", alignment=3)
    with pytest.raises(ls.InvalidInputError):
        ls.CheckpointManager(tmp_path / "m", compression="no-such-codec").save_async(1, s)
    with pytest.raises(ls.InvalidInputError, match="step"):
        ls.CheckpointManager(tmp_path / "m").save_async(-1, s)
    assert sorted(os.listdir(tmp_path)) == ["m"] and os.listdir(tmp_path / "m") == []


def test_a_snapshot_that_fails_leaves_nothing_behind(tmp_path, monkeypatch):
    mgr = ls.CheckpointManager(tmp_path)
    mgr.save(1, state(1))

    def out_of_memory(*args):
        raise MemoryError("no room for the snapshot")

    monkeypatch.setattr(background, "snapshot", out_of_memory)
    with pytest.raises(MemoryError):
        mgr.save_async(1, state(5))
    assert mgr.steps() == [1] and sorted(os.listdir(tmp_path)) == [LOCK_NAME, mgr.path(1).name]  # the partial went
    same_tree(state(1), mgr.restore(1))  # the old step 1 is still listed and whole
    monkeypatch.undo()
    mgr.save_async(2, state(2)).result(timeout=60)
    assert mgr.steps() == [1, 2]


# -- one save in flight, in order -----------------------------------------------------------


@pytest.mark.slow
def test_a_second_save_waits_for_the_one_in_flight(tmp_path, gate):
    g = gate("before")
    mgr = ls.CheckpointManager(tmp_path)
    first = mgr.save_async(1, state(1))
    assert g.entered.wait(30)
    returned = threading.Event()
    second: list = []

    def save_again():
        second.append(mgr.save_async(2, state(2)))
        returned.set()

    t = threading.Thread(target=save_again)
    t.start()
    assert not returned.wait(0.5)  # held behind the first save
    assert not first.done()
    g.open()
    t.join(30)
    assert first.done() and second[0].result(timeout=60) == mgr.path(2)
    mgr.close()
    assert mgr.steps() == [1, 2]


def test_readers_see_only_durable_checkpoints_and_retention_waits(tmp_path, gate):
    mgr = ls.CheckpointManager(tmp_path, keep_last=1)
    mgr.save(1, state(1))
    g = gate("after")
    future = mgr.save_async(2, state(2))
    assert g.entered.wait(30)
    # The new file is renamed into place, but its save has not finished: not
    # listed yet, and the old checkpoint is still there (retention runs after).
    assert mgr.path(2).exists() and mgr.path(1).exists()
    assert mgr.steps() == [1] and mgr.latest() == 1
    same_tree(state(1), mgr.restore())
    with pytest.raises(ls.CheckpointNotFoundError):
        mgr.restore(2)
    g.open()
    future.result(timeout=60)
    assert mgr.steps() == [2]
    same_tree(state(2), mgr.restore())


def test_the_manager_is_a_context_manager_that_waits(tmp_path, gate):
    g = gate("before")
    with ls.CheckpointManager(tmp_path) as mgr:
        future = mgr.save_async(7, state(7))
        g.open()
    assert future.done() and mgr.steps() == [7]
    # Closed, still usable: the worker and the buffers come back.
    mgr.save_async(8, state(8)).result(timeout=60)
    mgr.close()
    assert mgr.steps() == [7, 8]


# -- failures reach whoever waits next ------------------------------------------------------


def _failing_save(mgr, step, s):
    """A background save whose first os.write fails; returns its future, done."""
    with SyscallFaults(fail_at=1, errno=errno.ENOSPC, calls=("write",)):
        future = mgr.save_async(step, s)
        wait_all([future], timeout=60)  # not result(): that would report the error
    assert future.done()
    return future


def _only_checkpoints(mgr) -> list[str]:
    names = sorted(set(os.listdir(mgr.directory)) - {LOCK_NAME})
    assert names == [mgr.path(s).name for s in mgr.steps()], names  # no partial file left
    return names


@pytest.mark.parametrize("reporter", ["next save", "blocking save", "wait", "close", "result"])
def test_a_background_failure_is_reported_once_and_the_manager_stays_usable(tmp_path, reporter):
    mgr = ls.CheckpointManager(tmp_path, keep_last=2)
    mgr.save(1, state(1))
    future = _failing_save(mgr, 2, state(2))
    report = {
        "next save": lambda: mgr.save_async(3, state(3)),
        "blocking save": lambda: mgr.save(3, state(3)),
        "wait": mgr.wait,
        "close": mgr.close,
        "result": future.result,
    }[reporter]
    with pytest.raises(OSError) as raised:
        report()
    assert raised.value.errno == errno.ENOSPC and "injected" in str(raised.value)
    assert future.exception() is raised.value
    # The failed save left nothing; the save that reported it saved nothing.
    assert mgr.steps() == [1] and _only_checkpoints(mgr)
    same_tree(state(1), mgr.restore())
    # Reported once: nobody else gets it.
    mgr.wait()
    mgr.close()
    # Usable: the next saves work, in the background too.
    mgr.save_async(3, state(3))
    mgr.save_async(4, state(4)).result(timeout=60)
    assert mgr.steps() == [3, 4] and _only_checkpoints(mgr)
    same_tree(state(4), mgr.restore())


def test_ls_save_failure_reaches_the_next_ls_save(tmp_path):
    ls.save({"w": np.zeros(4)}, tmp_path / "ck.lzy")
    with SyscallFaults(fail_at=1, errno=errno.EIO, calls=("fsync",)):
        future = ls.save_async({"w": np.ones(4)}, tmp_path / "ck.lzy")
        wait_all([future], timeout=60)
    with pytest.raises(OSError, match="injected"):
        ls.save_async({"w": np.full(4, 2.0)}, tmp_path / "ck.lzy")
    assert np.array_equal(ls.load(tmp_path / "ck.lzy")["w"], np.zeros(4))  # the old one, intact
    ls.save_async({"w": np.full(4, 3.0)}, tmp_path / "ck.lzy").result(timeout=60)
    assert np.array_equal(ls.load(tmp_path / "ck.lzy")["w"], np.full(4, 3.0))
    assert os.listdir(tmp_path) == ["ck.lzy"]


def test_a_failure_on_leaving_the_with_block_is_raised(tmp_path):
    with pytest.raises(OSError, match="injected"), ls.CheckpointManager(tmp_path) as mgr:
        _failing_save(mgr, 1, state(1))
    # The body's own error wins; the save's failure is added to it.
    with pytest.raises(KeyError) as raised, ls.CheckpointManager(tmp_path) as mgr:
        _failing_save(mgr, 1, state(1))
        raise KeyError("the body's error")
    assert any("background save failed" in note for note in getattr(raised.value, "__notes__", []))


def test_a_failure_nobody_asked_about_is_logged(caplog):
    future = SaveFuture()
    future.set_running_or_notify_cancel()
    future.set_exception(OSError(errno.EIO, "disk gone"))
    with caplog.at_level(logging.ERROR, logger="lazystore"):
        del future
    assert "nobody asked" in caplog.text and "disk gone" in caplog.text
    asked = SaveFuture()
    asked.set_running_or_notify_cancel()
    asked.set_exception(OSError(errno.EIO, "seen"))
    assert isinstance(asked.exception(), OSError)
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="lazystore"):
        del asked
    assert caplog.text == ""


# -- memory -----------------------------------------------------------------------------------


def _addresses(leaves: dict) -> dict:
    return {k: np.asarray(v).__array_interface__["data"][0] for k, v in leaves.items()}


def test_snapshot_buffers_are_reused_from_save_to_save(tmp_path, gate):
    g = gate("before")
    g.open()
    mgr = ls.CheckpointManager(tmp_path, keep_last=1)
    s = state(1)
    for step in range(1, 4):
        mgr.save_async(step, s)
        mutate(s)
    mgr.wait()
    first, *later = [_addresses(leaves) for leaves in g.seen]
    assert all(addresses == first for addresses in later)  # the same buffers each time
    assert all(leaves["model/w"] is not s["model"]["w"] for leaves in g.seen)
    # A new shape gets a new buffer; a key that went away lets its buffer go.
    s["model"]["w"] = torch.zeros(3)
    del s["opt"]["moments"]
    mgr.save_async(9, s)
    mgr.close()
    last = _addresses(g.seen[-1])
    assert "opt/moments/0" not in last and last["model/b"] == first["model/b"]
    same_tree(s, mgr.restore(9))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_tensors_are_copied_into_a_pinned_pool(tmp_path, gate):
    g = gate("before")
    s = {"w": torch.arange(1 << 20, dtype=torch.float32, device="cuda"), "step": 1}
    mgr = ls.CheckpointManager(tmp_path)
    future = mgr.save_async(1, s)
    s["w"].zero_()
    g.open()
    future.result(timeout=60)
    assert torch.equal(mgr.restore(1)["w"], torch.arange(1 << 20, dtype=torch.float32))
    mgr.save_async(2, s).result(timeout=60)
    assert _addresses(g.seen[0]) == _addresses(g.seen[1])  # the pinned buffer, reused
    held = mgr._saver._buffers._held["w"]
    assert held.is_pinned()
    mgr.close()


# -- torch.distributed.checkpoint -----------------------------------------------------------


def test_dcp_async_save_with_lazystore_writer_keeps_the_state_as_it_was(tmp_path):
    import torch.distributed.checkpoint as dcp

    from lazystore.dcp import LazyStoreReader, LazyStoreWriter

    sd = {"w": torch.arange(1000, dtype=torch.float32), "b": torch.ones(7, dtype=torch.bfloat16)}
    expected = {k: v.clone() for k, v in sd.items()}
    future = dcp.async_save(sd, storage_writer=LazyStoreWriter(tmp_path / "ck", compression="zstd"), no_dist=True)
    for v in sd.values():  # right after the call returns
        v.zero_()
    future.result(timeout=60)
    target = {k: torch.empty_like(v) for k, v in expected.items()}
    dcp.load(target, storage_reader=LazyStoreReader(tmp_path / "ck"), no_dist=True)
    assert all(torch.equal(target[k], expected[k]) for k in expected)
