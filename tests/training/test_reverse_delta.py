"""CheckpointManager(delta=True) keeps the newest checkpoint whole and codes
the one before it against it once the save is durable
(lazystore/training/reverse.py): in the background with save_async, a
failure costing bytes only, a crash between the two leaving two whole
files, and folders of format 1.2 forward deltas migrated first."""

from __future__ import annotations

import errno
import logging
import threading

import pytest

import lazystore as ls
from lazystore import cli
from lazystore.codecs import delta as delta_codecs
from lazystore.testing.strategies import same_tree
from lazystore.training import reverse
from lazystore.training.saver_lock import LOCK_NAME
from lazystore.writing import writer as writer_module
from tests.training.test_manager_delta import base_names, check_folder, moving, state


@pytest.mark.slow
def test_each_delta_file_opens_alone_with_load_open_and_the_cli(tmp_path, capsys):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    for step in range(1, 4):
        mgr.save(step, state(step))
    assert base_names(mgr) == {1: mgr.path(2).name, 2: mgr.path(3).name, 3: None}
    oldest = mgr.path(1)
    same_tree(state(1), ls.load(oldest))
    with ls.open(oldest) as ck:
        assert ck.base == str(mgr.path(2)) and ck.verify() == []
    assert cli.main(["verify", str(oldest)]) == 0
    assert cli.main(["info", str(oldest)]) == 0
    capsys.readouterr()


@pytest.mark.slow
def test_background_saves_code_the_previous_checkpoint_on_the_worker(tmp_path, monkeypatch):
    threads = []
    real = reverse.after_save

    def recording(mgr, step):
        threads.append(threading.current_thread().name)
        real(mgr, step)

    monkeypatch.setattr(reverse, "after_save", recording)
    with ls.CheckpointManager(tmp_path, delta=True, compression="zstd", keep_last=4) as mgr:
        # Back to back: each save waits for the one in flight, its rewrite included.
        futures = [mgr.save_async(step, moving(step)) for step in range(1, 7)]
        assert [f.result() for f in futures] == [mgr.path(s) for s in range(1, 7)]
    # close() waited for the last rewrite: the shape is complete.
    assert threads and all(name.startswith("lazystore-save") for name in threads), threads
    assert mgr.steps() == [3, 4, 5, 6] and mgr.files.base_name(5) == mgr.path(6).name
    check_folder(mgr, moving)


class _DiskFull(writer_module.Writer):
    def add(self, name, array):
        raise OSError(errno.ENOSPC, "No space left on device (injected)")


@pytest.mark.slow
@pytest.mark.parametrize("in_background", [False, True], ids=["save", "save_async"])
def test_a_failed_rewrite_leaves_the_previous_checkpoint_whole_and_the_save_succeeds(
        tmp_path, monkeypatch, caplog, in_background):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    mgr.save(1, state(1))
    before = mgr.path(1).read_bytes()
    monkeypatch.setattr("lazystore.training.rebasing.Writer", _DiskFull)
    with caplog.at_level(logging.WARNING, logger="lazystore"):
        path = mgr.save_async(2, state(2)).result() if in_background else mgr.save(2, state(2))
    assert path == mgr.path(2)
    assert mgr.path(1).read_bytes() == before  # whole, as it was
    assert any("stays whole" in r.getMessage() and "No space left" in r.getMessage() for r in caplog.records)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != LOCK_NAME) == [mgr.path(1).name, mgr.path(2).name]
    monkeypatch.undo()
    mgr.save(3, state(3))  # goes on: 2 coded against 3; 1 stays a whole one among the old
    assert base_names(mgr) == {1: None, 2: mgr.path(3).name, 3: None}
    check_folder(mgr)
    mgr.close()


@pytest.mark.slow
def test_two_whole_files_left_by_a_crash_before_the_rewrite_are_a_valid_series(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    mgr.save(1, state(1))
    mgr.save(2, state(2))
    mgr.close()
    # What a kill between writing 3 and coding 2 against it leaves: 3 whole beside 2 whole.
    ls.save(state(3), mgr.path(3), compression="zstd")
    assert base_names(mgr) == {1: mgr.path(2).name, 2: None, 3: None}
    check_folder(mgr)
    again = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    again.save(4, state(4))
    assert base_names(again) == {1: mgr.path(2).name, 2: None, 3: mgr.path(4).name, 4: None}
    check_folder(again)


# -- folders of older versions -------------------------------------------------------------


@pytest.fixture
def legacy_writer(monkeypatch):
    """While active, ls.save(base=...) writes format 1.2 delta files (codec 2,
    16-byte chunk records), as lazystore did before format 1.3."""
    monkeypatch.setattr("lazystore.writing.delta_writer.ContentDeltaPlanes", delta_codecs.DeltaPlanes)
    monkeypatch.setattr(writer_module, "CONTENT_DELTA_MINOR", 2)
    records = writer_module._chunk_records
    monkeypatch.setattr(writer_module, "_chunk_records", lambda lengths, sums, bases, deltas: records(
        lengths, sums, bases, False))
    return monkeypatch


@pytest.mark.slow
def test_a_folder_of_format_1_2_deltas_is_migrated_on_the_next_save(tmp_path, legacy_writer):
    path = ls.CheckpointManager(tmp_path).path
    # A forward chain 3 -> 2 -> 1, and 4 coded against 5 (the newest, whole): all format 1.2.
    for step, base in ((1, None), (2, 1), (3, 2), (5, None), (4, 5)):
        ls.save(state(step), path(step), compression="zstd", base=None if base is None else path(base))
    with ls.open(path(3)) as ck:
        assert ck.format_version == (1, 2) and ck.info("model/w").compression == "delta"
    legacy_writer.undo()
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    mgr.save(6, state(6))
    # Every 1.2 delta re-encoded (3 before 2: re-encoding 2 first would have
    # orphaned 3), then 5 coded against 6: 4, coded against 5, survives it.
    assert mgr.files.base_name(5) == path(6).name and mgr.files.base_name(4) == path(5).name
    for step in mgr.steps():
        with mgr.open(step) as ck:
            assert ck.format_version != (1, 2), step
    check_folder(mgr)


@pytest.mark.slow
def test_a_reader_holding_the_previous_checkpoint_open_reads_it_through_its_rewrite(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True, compression="zstd")
    mgr.save(1, state(1))
    with mgr.open(1) as before:
        mgr.save(2, state(2))  # 1 written again, as a delta against 2, while it is open
        assert mgr.files.base_name(1) == mgr.path(2).name
        for name, array in before.load().items():  # the old file's bytes, still mapped
            assert array.tobytes() == state(1)["model"][name.split("/")[1]].tobytes(), name
    same_tree(state(1), mgr.restore(1))
