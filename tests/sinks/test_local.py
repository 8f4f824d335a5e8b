"""The local sink: a locked partial file, fsync, rename, folder fsync; and
what a failed save leaves behind (nothing).

The full-disk tests mount a small tmpfs (root on Linux); they skip cleanly
where mounting is not allowed."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

import lazystore as ls


@contextlib.contextmanager
def small_disk(tmp_path, mib: int):
    """A tmpfs of ``mib`` MiB mounted under tmp_path, or a skip."""
    mnt = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def noisy(mib: float, seed: int = 0) -> np.ndarray:
    """Floats that zstd shrinks a little but not much, so compressed saves
    buffer real data."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal(int(mib * (1 << 20)) // 4).astype(np.float32)


@pytest.mark.slow
def test_a_full_disk_fails_the_save_and_leaves_nothing_behind(tmp_path):
    with small_disk(tmp_path, 40) as disk:
        first = {"w": noisy(8)}
        ls.save(first, disk / "c.lzy", compression="zstd")
        big = {f"w{i}": noisy(8, i) for i in range(5)}  # 40 MiB: does not fit beside the first
        with pytest.raises(OSError) as raised:
            ls.save(big, disk / "c.lzy", compression="zstd")
        assert raised.value.errno == errno.ENOSPC
        # Nothing but the previous checkpoint, intact.
        assert sorted(p.name for p in disk.iterdir()) == ["c.lzy"]
        with ls.open(disk / "c.lzy") as ck:
            assert ck.verify() == []
            assert np.array_equal(ck["w"], first["w"])
        # The space came back: a save into another folder of the same disk works.
        (disk / "other").mkdir()
        mgr = ls.CheckpointManager(disk / "other", keep_last=1)
        mgr.save(1, {"w": noisy(8, 9)})
        assert mgr.steps() == [1]


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_full_disk_never_leaves_a_partial_file(tmp_path, compression):
    with small_disk(tmp_path, 24) as disk:
        with pytest.raises(OSError) as raised:
            ls.save({f"w{i}": noisy(4, i) for i in range(8)}, disk / "c.lzy", compression=compression)
        assert raised.value.errno == errno.ENOSPC
        assert list(disk.iterdir()) == []


def _file_writes(monkeypatch, folder) -> list[tuple[str, int, int]]:
    """Record (call, file offset, bytes) of every os.write / os.writev to a
    file under ``folder``."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to tell which file a descriptor is")
    log = []
    for name in ("write", "writev"):
        real = getattr(os, name)

        def call(fd, data, _real=real, _name=name):
            target = os.readlink(f"/proc/self/fd/{fd}")
            at = os.lseek(fd, 0, os.SEEK_CUR) if target.startswith(str(folder)) else None
            n = _real(fd, data)
            if at is not None:
                log.append((_name, at, n))
            return n

        monkeypatch.setattr(os, name, call)
    return log


@pytest.mark.slow
def test_writes_start_and_end_on_block_boundaries(tmp_path, monkeypatch):
    # The page cache is filled in folios sized and aligned by each write;
    # a mapped read then faults a folio at a time (see sinks/local.py).
    from lazystore.sinks.local import WRITE_ALIGN

    state = {"a": noisy(5.3), "b": np.arange(10, dtype=np.int64), "c": noisy(3.1, seed=1),
             "d": noisy(0.2, seed=2)}
    log = _file_writes(monkeypatch, tmp_path)
    ls.save(state, tmp_path / "ck.lzy")
    monkeypatch.undo()
    assert len(log) > 3
    *aligned, last = log
    assert all(at % WRITE_ALIGN == 0 and n % WRITE_ALIGN == 0 for _, at, n in aligned), log
    assert last[1] % WRITE_ALIGN == 0
    assert last[1] + last[2] == os.path.getsize(tmp_path / "ck.lzy")
    # A window of several chunks goes out in one call, from the tensor's own memory.
    assert any(call == "writev" for call, _, _ in log), log
    with ls.open(tmp_path / "ck.lzy") as ck:
        assert ck.verify() == []
        assert all(np.array_equal(ck[k], v) for k, v in state.items())


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_short_writev_calls_still_write_every_byte(tmp_path, compression):
    from lazystore.testing.faults import SyscallFaults

    state = {"a": noisy(9.1), "b": noisy(0.01, seed=3)}
    with SyscallFaults(calls=(), short_writes=4097) as faults:  # not a multiple of anything
        ls.save(state, tmp_path / "ck.lzy", compression=compression, chunk_bytes=1 << 20)
    with ls.open(tmp_path / "ck.lzy") as ck:
        assert ck.verify() == []
        assert all(np.array_equal(ck[k], v) for k, v in state.items())
    assert faults.count == 0
