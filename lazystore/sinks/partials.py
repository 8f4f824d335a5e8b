"""The temporary files writers fill beside their targets, and their clean-up.

A writer fills ``.<target name>.<12 hex>.partial`` in the target's folder and
renames it over the target when done. While it works it holds an exclusive
``flock`` on the file, so a partial file nobody holds a lock on was left by
a writer that died (killed, crashed, power lost) and can be removed. Readers
never look at partial files: they are hidden, and never the target's name.

Creating a file and locking it are two steps, and a clean-up that ran
between them would take a live writer's new file for a dead one's. So both
take a lock on the folder itself: creators a shared one, held only while
they create and lock their file; a clean-up an exclusive one, and it skips
its work when a creator holds the folder (the next save cleans up instead).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from pathlib import Path

PARTIAL_SUFFIX = ".partial"
PARTIAL_NAME = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{12}" + re.escape(PARTIAL_SUFFIX))
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def partial_name(target_name: str) -> str:
    """A fresh partial file name for a target called ``target_name``."""
    return f".{target_name}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}"


def create(target: Path) -> tuple[Path, int]:
    """Create and lock a new partial file for ``target``: (path, file descriptor)."""
    path = target.parent / partial_name(target.name)
    with folder_lock(target.parent, fcntl.LOCK_SH):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            path.unlink(missing_ok=True)
            os.close(fd)
            raise
    return path, fd


def remove_stale(folder: Path) -> list[Path]:
    """Delete the partial files in ``folder`` whose writers are gone (no lock
    held). Returns what was removed. Files it cannot inspect are left alone,
    and so is everything while another writer is creating its file."""
    try:
        with folder_lock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB):
            return remove_stale_held(folder)
    except OSError:
        return []  # a creator holds the folder, or it cannot be read or locked: clean up next time


def remove_stale_held(folder: Path) -> list[Path]:
    """:func:`remove_stale` for a caller that already holds the exclusive
    folder lock (a sharded save cleaning up after it published)."""
    removed: list[Path] = []
    for name in os.listdir(folder):
        if PARTIAL_NAME.fullmatch(name) and _remove_if_unlocked(folder / name):
            removed.append(folder / name)
    return removed


def _remove_if_unlocked(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC)
    except OSError:
        return False  # gone already, or not a plain file
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # a live writer holds it
    else:
        path.unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def folder_lock(folder: Path, operation: int):
    """Hold ``flock(operation)`` on the folder itself for the block. Where a
    file system cannot lock folders, creators go ahead unlocked (and clean-ups
    find it unlockable and skip: leaving a dead file beats deleting a live one)."""
    fd = os.open(folder, os.O_RDONLY | _CLOEXEC)
    try:
        try:
            fcntl.flock(fd, operation)
        except OSError:
            if operation & fcntl.LOCK_EX:
                raise
        yield
    finally:
        os.close(fd)  # releases the lock
