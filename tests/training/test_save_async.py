"""One return type per function (issue 30): ``ls.save`` returns None and
``CheckpointManager.save`` the checkpoint's path, always; ``save_async``
beside each returns a future, as DCP's ``save``/``async_save`` do.

``blocking=False`` on either ``save`` still works, returning the future as
before, with a DeprecationWarning naming the replacement; ``blocking=True``
said aloud is the default, and silent."""

from __future__ import annotations

import errno
import inspect
import io
import warnings
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.faults import SyscallFaults

STATE = {"model": {"w": np.arange(6, dtype=np.float32)}, "step": 3}


def _same(loaded, expected=STATE) -> None:
    assert np.array_equal(loaded["model"]["w"], expected["model"]["w"]) and loaded["step"] == expected["step"]


# -- the new shape -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["file", "sharded folder", "file object"])
def test_ls_save_returns_none_whatever_it_writes(tmp_path, where):
    target = {"file": tmp_path / "a.lzy", "sharded folder": tmp_path / "shards", "file object": io.BytesIO()}[where]
    options = {"max_shard_size": 1 << 20} if where == "sharded folder" else {}
    assert ls.save(STATE, target, **options) is None
    if isinstance(target, io.BytesIO):
        target.seek(0)
    _same(ls.load(target))


def test_ls_save_async_returns_a_future_of_the_path(tmp_path):
    future = ls.save_async(STATE, tmp_path / "a.lzy", compression="zstd")
    assert isinstance(future, Future)
    assert future.result(timeout=60) == tmp_path / "a.lzy"
    _same(ls.load(tmp_path / "a.lzy"))
    folder = ls.save_async(STATE, str(tmp_path / "shards"), max_shard_size=1 << 20).result(timeout=60)
    assert folder == tmp_path / "shards"
    _same(ls.load(folder))


def test_save_async_takes_saves_keywords_but_blocking():
    save, save_async = inspect.signature(ls.save), inspect.signature(ls.save_async)
    assert [p for p in save.parameters if p != "blocking"] == list(save_async.parameters)
    assert "save_async" in ls.__all__


def test_ls_save_async_to_a_file_object_is_refused_at_the_call():
    with pytest.raises(ls.InvalidInputError, match="save_async need a path"):
        ls.save_async(STATE, io.BytesIO())


def test_a_failed_background_save_is_the_futures_error(tmp_path):
    with SyscallFaults(fail_at=1, errno=errno.ENOSPC, calls=("write",)):
        future = ls.save_async(STATE, tmp_path / "a.lzy")
        with pytest.raises(OSError, match="injected") as raised:
            future.result(timeout=60)
    assert raised.value.errno == errno.ENOSPC
    assert not (tmp_path / "a.lzy").exists()
    ls.save(STATE, tmp_path / "a.lzy")  # reported once, to result(): the next save is not refused


def test_manager_save_returns_the_path_and_save_async_a_future_of_it(tmp_path):
    with ls.CheckpointManager(tmp_path, keep_last=2) as mgr:
        path = mgr.save(1, STATE, metrics={"loss": 1.0})
        assert isinstance(path, Path) and path == mgr.path(1)
        future = mgr.save_async(2, STATE, metrics={"loss": 0.5})
        assert isinstance(future, Future)
        assert future.result(timeout=60) == mgr.path(2)
        assert mgr.steps() == [1, 2] and mgr.metrics(2) == {"loss": 0.5}
        _same(mgr.restore(2))


def test_a_failed_manager_save_async_is_the_futures_error(tmp_path):
    with ls.CheckpointManager(tmp_path) as mgr:
        with SyscallFaults(fail_at=1, errno=errno.ENOSPC, calls=("write",)):
            future = mgr.save_async(1, STATE)
            with pytest.raises(OSError, match="injected"):
                future.result(timeout=60)
        assert mgr.steps() == []
        mgr.wait()  # seen by result(): not raised again


# -- the deprecation path ---------------------------------------------------------------


def test_ls_save_blocking_false_warns_naming_save_async_and_still_returns_the_future(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"lazystore\.save\(blocking=False\).*lazystore\.save_async") as seen:
        future = ls.save(STATE, tmp_path / "a.lzy", blocking=False)
    assert [w.filename for w in seen] == [__file__]  # the warning names the caller's line
    assert isinstance(future, Future) and future.result(timeout=60) == tmp_path / "a.lzy"
    _same(ls.load(tmp_path / "a.lzy"))


def test_manager_save_blocking_false_warns_naming_save_async_and_still_returns_the_future(tmp_path):
    with ls.CheckpointManager(tmp_path) as mgr:
        with pytest.warns(DeprecationWarning, match=r"CheckpointManager\.save_async") as seen:
            future = mgr.save(4, STATE, blocking=False)
        assert [w.filename for w in seen] == [__file__]
        assert isinstance(future, Future) and future.result(timeout=60) == mgr.path(4)
        _same(mgr.restore(4))


def test_blocking_false_keeps_its_refusals(tmp_path):
    with pytest.warns(DeprecationWarning), pytest.raises(ls.InvalidInputError, match="save_async need a path"):
        ls.save(STATE, io.BytesIO(), blocking=False)
    with pytest.warns(DeprecationWarning), pytest.raises(ls.InvalidInputError, match="step"):
        ls.CheckpointManager(tmp_path).save(-1, STATE, blocking=False)


def test_blocking_true_said_aloud_is_silent(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ls.save(STATE, tmp_path / "a.lzy", blocking=True) is None
        with ls.CheckpointManager(tmp_path / "m") as mgr:
            assert mgr.save(1, STATE, blocking=True) == mgr.path(1)


def test_the_suite_refuses_blocking_false_outside_pytest_warns(tmp_path):
    """pyproject.toml's filterwarnings makes the warning an error, so no test
    (and nothing in lazystore they run) still saves with blocking=False."""
    with pytest.raises(DeprecationWarning, match="save_async"):
        ls.save(STATE, tmp_path / "a.lzy", blocking=False)
    with pytest.raises(DeprecationWarning, match="save_async"):
        ls.CheckpointManager(tmp_path / "m").save(1, STATE, blocking=False)
    assert not (tmp_path / "a.lzy").exists() and ls.CheckpointManager(tmp_path / "m").steps() == []
