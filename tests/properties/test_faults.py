"""Fail the k-th I/O call of a save, for every k, and check what is left.

After each injected EIO or ENOSPC (``lazystore.testing.faults``): the save
raised that very error (never one from the clean-up), the previous
checkpoint still opens and verifies (or, when the failing call came after
the rename that publishes the new one, the new one does), no partial or
temporary file is left, and the next save works."""

from __future__ import annotations

import errno
import json
import os

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore.interop import to_safetensors
from lazystore.testing.faults import SyscallFaults
from lazystore.training.step_files import checkpoint_name

ERRNOS = [errno.EIO, errno.ENOSPC]


def state(version: int) -> dict:
    rng = np.random.default_rng(version)
    return {
        "embed": rng.standard_normal((256, 128)).astype(np.float32),  # 128 KiB: one write of its own
        "bias": np.full(7, version, np.int64),  # small: gathered with the padding and the index
        "ids": np.arange(40_000, dtype=np.int32) + version,
        "scale": np.float64(version),
    }


def newer_state(version: int) -> dict:
    """A state with a tensor of a format 1.1 dtype: a local save starts its
    file as format 1.0 and rewrites the preamble on close (``os.pwrite``)."""
    return {**state(version), "scales": np.full(16, 2.0**version, ml_dtypes.float8_e8m0fnu)}


STATES = {"format-1.0": state, "format-1.1": newer_state}


def same(ck, expected: dict) -> bool:
    return list(ck) == list(expected) and all(np.array_equal(ck[k], v) for k, v in expected.items())


def check_one_of(path, *versions: dict) -> dict:
    """The checkpoint at ``path`` verifies and holds one of ``versions``; which."""
    with ls.open(path) as ck:
        assert ck.verify() == []
        for v in versions:
            if same(ck, v):
                return v
    raise AssertionError(f"{path} holds neither the old nor the new checkpoint")


def count_calls(save) -> int:
    with SyscallFaults() as dry:
        save()
    assert {"write", "fsync", "replace"} <= set(dry.log), dry.log
    return dry.count


def every_fault(reset, save, errnum: int):
    """For every k: ``reset()``, then run ``save()`` with its k-th I/O call
    failing, check it raised that very error, and yield ``(k, faults)`` for
    the caller's checks. Ends with one more ``reset()``."""
    reset()
    n = count_calls(save)
    assert n >= 4, "too few calls to be a real save"
    for k in range(1, n + 1):
        reset()
        with SyscallFaults(fail_at=k, errno=errnum) as faults:
            with pytest.raises(OSError) as raised:
                save()
        assert faults.failed == (k, faults.log[k - 1])
        assert raised.value.errno == errnum, f"call {k} ({faults.failed}): {raised.value!r}"
        assert "injected" in str(raised.value), f"call {k}: the clean-up's error hid the fault: {raised.value!r}"
        yield k, faults
    reset()


def published(faults: SyscallFaults) -> bool:
    """Did the failing call come after the rename that publishes the file?"""
    return "replace" in faults.log[: faults.failed[0] - 1]


@pytest.mark.slow
@pytest.mark.parametrize("version", list(STATES))
@pytest.mark.parametrize("errnum", ERRNOS, ids=errno.errorcode.get)
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_failing_call_of_a_save_keeps_the_previous_checkpoint(tmp_path, compression, errnum, version):
    path = tmp_path / "ck.lzy"
    old, new = STATES[version](1), STATES[version](2)
    for k, faults in every_fault(lambda: ls.save(old, path, compression=compression),
                                 lambda: ls.save(new, path, compression=compression), errnum):
        held = check_one_of(path, old, new)
        assert held is old or published(faults), f"call {k} ({faults.failed}) published the new file"
        assert os.listdir(tmp_path) == ["ck.lzy"], f"call {k} ({faults.failed}): files left"
    ls.save(new, path, compression=compression)  # the next save works
    assert check_one_of(path, new) is new


@pytest.mark.slow
@pytest.mark.parametrize("errnum", ERRNOS, ids=errno.errorcode.get)
def test_every_failing_call_of_a_save_through_a_symlink_keeps_the_link_and_the_checkpoint(tmp_path, errnum):
    # The partial file is made beside the link's target, in another folder.
    (tmp_path / "real").mkdir()
    (tmp_path / "links").mkdir()
    path, link = tmp_path / "real" / "ck.lzy", tmp_path / "links" / "latest.lzy"
    link.symlink_to(os.path.join("..", "real", "ck.lzy"))
    old, new = state(1), state(2)
    for k, faults in every_fault(lambda: ls.save(old, path), lambda: ls.save(new, link), errnum):
        held = check_one_of(path, old, new)
        assert held is old or published(faults), f"call {k} ({faults.failed}) published the new file"
        assert link.is_symlink() and os.readlink(link) == os.path.join("..", "real", "ck.lzy"), f"call {k}"
        assert os.listdir(tmp_path / "real") == ["ck.lzy"], f"call {k} ({faults.failed}): files left"
        assert os.listdir(tmp_path / "links") == ["latest.lzy"], f"call {k} ({faults.failed}): files left"
    ls.save(new, link)
    assert check_one_of(path, new) is new and link.is_symlink()


@pytest.mark.slow
@pytest.mark.parametrize("errnum", ERRNOS, ids=errno.errorcode.get)
def test_every_failing_call_of_a_manager_save_keeps_every_listed_step(tmp_path, errnum):
    folder = tmp_path / "ckpts"
    mgr = ls.CheckpointManager(folder, keep_last=2)

    def reset():
        for name in os.listdir(folder):
            os.remove(folder / name)
        mgr.save(1, state(1))
        mgr.save(2, state(2))

    for k, faults in every_fault(reset, lambda: mgr.save(3, state(3)), errnum):
        steps = mgr.steps()
        # Before the rename: unchanged. After it, before retention: 3 too.
        # In retention's folder fsync: 1 already gone.
        assert steps in ([1, 2], [1, 2, 3], [2, 3]), f"call {k} ({faults.failed}): steps {steps}"
        assert steps == [1, 2] or published(faults)
        for step in steps:
            with mgr.open(step) as ck:
                assert ck.verify() == [] and same(ck, state(step)), f"call {k}: step {step}"
        names = sorted(os.listdir(folder))
        assert names == [checkpoint_name(s) for s in steps], f"call {k} ({faults.failed}): files left: {names}"
    mgr.save(3, state(3))  # the next save works, and retention runs
    assert mgr.steps() == [2, 3]
    assert sorted(os.listdir(folder)) == [checkpoint_name(2), checkpoint_name(3)]


@pytest.mark.slow
@pytest.mark.parametrize("errnum", ERRNOS, ids=errno.errorcode.get)
def test_every_failing_call_of_a_safetensors_save_keeps_the_previous_file(tmp_path, errnum):
    src, path = tmp_path / "src.lzy", tmp_path / "out.safetensors"

    def reset():
        ls.save(state(2), src)
        to_safetensors(src, path)
        ls.save(state(3), src)  # what the faulty save copies

    for k, faults in every_fault(reset, lambda: to_safetensors(src, path), errnum):
        with ls.open(path) as ck:
            assert ck.verify() == []
            assert same(ck, state(2)) or published(faults) and same(ck, state(3)), f"call {k}"
        assert sorted(os.listdir(tmp_path)) == ["out.safetensors", "src.lzy"], f"call {k} ({faults.failed})"
    to_safetensors(src, path)
    with ls.open(path) as ck:
        assert same(ck, state(3))


@pytest.mark.slow
@pytest.mark.parametrize("version", list(STATES))
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_short_writes_still_write_every_byte(tmp_path, compression, version):
    path = tmp_path / "ck.lzy"
    with SyscallFaults(calls=(), short_writes=7):  # shorter than the 16-byte preamble the head rewrite writes
        ls.save(STATES[version](5), path, compression=compression)
    with ls.open(path) as ck:
        assert ck.verify() == [] and same(ck, STATES[version](5))


def test_the_head_rewrite_is_a_counted_call(tmp_path):
    # A save of a format 1.1 dtype rewrites the file's first bytes with
    # os.pwrite: a call that can fail like any other write, so it is counted.
    with SyscallFaults() as faults:
        ls.save(newer_state(1), tmp_path / "ck.lzy")
    assert faults.log.count("pwrite") == 1
    assert faults.log.index("pwrite") < faults.log.index("fsync")  # before the file is made durable
    with SyscallFaults() as faults:
        ls.save(state(1), tmp_path / "ck.lzy")
    assert "pwrite" not in faults.log  # a format 1.0 file is right from its first byte


def test_a_failing_background_flush_fails_the_save(tmp_path, monkeypatch):
    # Linux reports a write-back error to one fsync per descriptor: if the
    # background fdatasync saw it, only that call knows. The save must fail.
    from lazystore.sinks import local

    monkeypatch.setattr(local._Partial, "FLUSH_EVERY", 64 << 10)
    path = tmp_path / "ck.lzy"
    ls.save(state(1), path)
    with SyscallFaults(fail_at=1, errno=errno.EIO, calls=("fdatasync",)) as faults:
        with pytest.raises(OSError) as raised:
            ls.save(state(2), path)
    assert faults.failed == (1, "fdatasync") and raised.value.errno == errno.EIO
    assert check_one_of(path, state(1)) is not None
    assert os.listdir(tmp_path) == ["ck.lzy"]


@pytest.mark.slow
@pytest.mark.parametrize("errnum", ERRNOS, ids=errno.errorcode.get)
def test_every_failing_call_of_a_sharded_save_keeps_the_previous_folder(tmp_path, errnum):
    folder = tmp_path / "ckpt"
    old, new = state(1), state(2)

    def listed() -> list[str]:
        with open(folder / "lazystore.index.json") as f:
            return sorted(["lazystore.index.json", *set(json.load(f)["weight_map"].values())])

    for k, faults in every_fault(lambda: ls.save(old, folder, max_shard_size=100_000),
                                 lambda: ls.save(new, folder, max_shard_size=100_000), errnum):
        with ls.open(folder) as ck:
            assert ck.verify() == []
            assert same(ck, old) or published(faults) and same(ck, new), f"call {k} ({faults.failed})"
        names = sorted(os.listdir(folder))
        assert not [n for n in names if n.startswith(".")], f"call {k} ({faults.failed}): staging files left"
        if published(faults):
            # The new index is in place but its durability unconfirmed: the
            # old shards stay until a save has made an index durable.
            assert set(listed()) <= set(names)
        else:  # only the index and the shards it names
            assert names == listed(), f"call {k} ({faults.failed}): files left"
    ls.save(new, folder, max_shard_size=100_000)
    with ls.open(folder) as ck:
        assert same(ck, new) and len(ck.shards) >= 2
    assert sorted(os.listdir(folder)) == listed()
