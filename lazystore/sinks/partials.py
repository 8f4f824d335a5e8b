"""The temporary files writers fill beside their targets, and their clean-up.

A writer fills ``.<target name>.<12 hex>.partial`` in the target's folder and
renames it over the target when done. Where that would pass the file
system's limit on a name (255 bytes: a 250-byte target name is legal), the
target's name in it is cut short; it still matches :data:`PARTIAL_NAME`. While it works it holds an exclusive
``flock`` on the file, so a partial file nobody holds a lock on was left by
a writer that died (killed, crashed, power lost) and can be removed. Readers
never look at partial files: they are hidden, and never the target's name.

A writer that dies leaves its partial file until a later save into that
folder (or :func:`remove_stale_partials`, the same function) removes it; a
process killed by a signal runs no clean-up of its own.

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
import stat
import uuid
from pathlib import Path

PARTIAL_SUFFIX = ".partial"
PARTIAL_NAME = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{12}" + re.escape(PARTIAL_SUFFIX))
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
# The usual limit on a file name's bytes, where the folder cannot tell its own.
DEFAULT_NAME_MAX = 255


def partial_name(target_name: str, name_max: int | None = None) -> str:
    """A fresh partial file name for a target called ``target_name``, at most
    ``name_max`` bytes: the target's name is cut (on a character boundary)
    where needed, and the unique tail kept whole."""
    tail = f".{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}"
    if name_max is not None:
        target_name = _cut(target_name, name_max - 1 - len(tail))
    return f".{target_name}{tail}"


def _cut(name: str, budget: int) -> str:
    """``name``'s longest prefix of at most ``budget`` bytes as the file
    system stores it (never less than one character, so the result stays
    a partial file's name)."""
    if len(os.fsencode(name)) <= budget:
        return name
    used = 0
    for i, ch in enumerate(name):
        used += len(os.fsencode(ch))
        if used > budget:
            return name[: max(i, 1)]
    return name


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX


def create(target: Path) -> tuple[Path, int]:
    """Create and lock a new partial file for ``target``: (path, file descriptor)."""
    path = target.parent / partial_name(target.name, _name_max(target.parent))
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
    and so is everything while another writer is creating its file. Every
    local save runs it on its target's folder before it starts; a caller
    that opens a folder for saving later (a checkpoint manager) may run it
    sooner, to have the disk space back."""
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
    # Only plain files are ours: a FIFO given a partial file's name would
    # hang a blocking open, and opening a device can act on it.
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
    except OSError:
        return False  # gone already, or not a plain file
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False  # swapped since the lstat
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
