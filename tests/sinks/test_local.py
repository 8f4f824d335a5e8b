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


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_a_full_disk_never_leaves_a_partial_file(tmp_path, compression):
    with small_disk(tmp_path, 24) as disk:
        with pytest.raises(OSError) as raised:
            ls.save({f"w{i}": noisy(4, i) for i in range(8)}, disk / "c.lzy", compression=compression)
        assert raised.value.errno == errno.ENOSPC
        assert list(disk.iterdir()) == []
