"""One saving manager per folder: an advisory lock held by the saver.

A manager folder is a small database, and two managers saving into it at
once (two processes, or two managers in one process) would choose bases,
rewrite and delete behind each other's backs. So a manager takes an
exclusive ``flock`` on the folder's lock file, :data:`LOCK_NAME`, at its
first save and holds it until :meth:`CheckpointManager.close` (or until the
manager is garbage-collected, or its process ends: the kernel drops the
lock of a process that dies, even by kill -9, so a lock is never stale).
A second saver is refused at once, never made to wait: waiting would hide
a misconfigured job behind a hang. Readers (``steps()``, ``restore()``)
never take it.

The lock file is created once and never deleted. Deleting it would let a
third process create a new file under the same name and lock that one
while the second still waits on the old one: two savers. Because the file
stays, opening (or creating) it and then locking it has no window: every
process locks the same inode.

The lock is only as good as the file system's ``flock``: local file
systems honour it; NFS (v4, or v3 with lockd) emulates it with byte-range
locks, which works between clients; some FUSE and object-store mounts
accept it without enforcing anything. There, keep to one saver yourself.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import weakref
from pathlib import Path

from lazystore.errors import FolderLockedError, FormatError

log = logging.getLogger("lazystore")

LOCK_NAME = ".lazystore-manager.lock"
# flock errors that mean "this file system cannot lock", not "someone holds it".
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class SaverLock:
    """The lock a saving manager holds on its folder: :meth:`acquire`
    (idempotent), :meth:`release`."""

    def __init__(self, folder: Path):
        self.path = folder / LOCK_NAME
        self._release: weakref.finalize[[int], SaverLock] | None = None  # closes the locked descriptor

    @property
    def held(self) -> bool:
        return self._release is not None and self._release.alive

    def acquire(self) -> None:
        """Hold the folder for this saver, or raise FolderLockedError at once."""
        if self.held:
            return
        # O_NOFOLLOW and O_NONBLOCK: a link or a FIFO planted under the name is refused, never followed or waited on.
        fd = os.open(self.path, _FLAGS, 0o666)  # an OSError here names the file
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise FormatError(f"{self.path} is not a regular file: it must be the folder's lock file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise FolderLockedError(
                f"another CheckpointManager is saving into {self.path.parent} (it holds {self.path}): one saver "
                "per folder. close() the other manager (or end its process), or save into another folder; "
                "any number of managers may read the folder meanwhile") from None
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED:
                os.close(fd)
                raise
            log.warning("the file system of %s cannot lock files (%s): the one-saver-per-folder rule is not "
                        "enforced there", self.path.parent, exc)
        except BaseException:
            os.close(fd)
            raise
        self._release = weakref.finalize(self, os.close, fd)  # closing the descriptor releases the lock

    def release(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None
