"""Durability: a save has made its bytes and its name durable before it returns.

Every local save fsyncs the finished temporary file, renames it over the
target, then fsyncs the folder (so the rename itself survives a power
loss). These tests record the ``os.fsync`` and ``os.replace`` calls a save
makes and check that order for each file a save publishes: ``ls.save``,
``CheckpointManager.save``, a sharded save (every shard and the index) and
a safetensors save.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import lazystore as ls


@pytest.fixture
def calls(monkeypatch):
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync", (st.st_dev, st.st_ino), stat.S_ISDIR(st.st_mode)))
        return real_fsync(fd)

    def replace(src, dst, *a, **kw):
        st = os.stat(src)
        events.append(("replace", (st.st_dev, st.st_ino), os.fspath(dst)))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return events


def assert_durable(events, target) -> None:
    """``target`` was published by a rename whose file was fsync'd before it,
    and whose folder was fsync'd after it."""
    target = os.fspath(target)
    renames = [i for i, e in enumerate(events) if e[0] == "replace" and os.fspath(e[2]) == target]
    assert renames, f"{target} was not published by a rename: {events}"
    i = renames[-1]
    inode = events[i][1]
    assert any(e[0] == "fsync" and e[1] == inode for e in events[:i]), f"{target}: data not fsync'd before rename"
    folder = os.stat(os.path.dirname(target))
    folder_id = (folder.st_dev, folder.st_ino)
    assert any(e[0] == "fsync" and e[1] == folder_id and e[2] for e in events[i + 1 :]), (
        f"{target}: folder not fsync'd after the rename")
    assert os.stat(target).st_ino == inode[1]


def test_ls_save_fsyncs_file_then_folder(tmp_path, calls):
    target = tmp_path / "ck.lzy"
    ls.save({"w": np.ones((64, 64), np.float32)}, target, compression="zstd")
    assert_durable(calls, target)


def test_a_save_through_a_symlink_fsyncs_the_real_file_and_its_folder(tmp_path, calls):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "ck.lzy"
    (tmp_path / "link.lzy").symlink_to(target)
    ls.save({"w": np.ones((64, 64), np.float32)}, tmp_path / "link.lzy")
    assert_durable(calls, target)
    assert (tmp_path / "link.lzy").is_symlink()


def test_manager_save_fsyncs_file_then_folder(tmp_path, calls):
    mgr = ls.CheckpointManager(tmp_path / "ckpts", keep_last=1)
    mgr.save(1, {"w": np.ones(8), "step": 1})
    assert_durable(calls, mgr.path(1))
    calls.clear()
    mgr.save(2, {"w": np.ones(8), "step": 2})  # retention removes step 1: folder fsync'd again
    assert_durable(calls, mgr.path(2))
    assert not mgr.path(1).exists()


def test_sharded_save_fsyncs_every_shard_and_the_index(tmp_path, calls):
    folder = tmp_path / "shards"
    ls.save({f"t{i}": np.full((16, 16), i, np.float32) for i in range(4)}, folder, max_shard_size=2048)
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 3  # 2 shards of 2 tensors, and the index
    for name in names:
        assert_durable(calls, folder / name)


def test_safetensors_save_fsyncs_file_then_folder(tmp_path, calls):
    from lazystore.interop.safetensors import SafetensorsWriter

    target = tmp_path / "m.safetensors"
    with SafetensorsWriter(target) as w:
        w.add("w", np.ones((4, 4), np.float32))
    assert_durable(calls, target)
