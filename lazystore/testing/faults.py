"""Failing system calls on purpose, the way storage engines test crash safety.

SQLite and LevelDB fail the k-th I/O call of an operation, for every k, and
check what is left afterwards. :class:`SyscallFaults` does that in-process
for the calls a lazystore save makes: it wraps ``os.write``, ``os.writev``
(a window of chunks in one call), ``os.pwrite`` (a local save's rewrite of
its first bytes), ``os.fsync``, ``os.fdatasync``,
``os.replace`` and ``os.rename``, counts them, and makes the k-th raise
``OSError`` with the errno asked for (EIO, ENOSPC, ...)::

    with SyscallFaults() as dry:             # count the calls of one save
        ls.save(state, path)
    for k in range(1, dry.count + 1):
        with SyscallFaults(fail_at=k, errno=errno.ENOSPC) as faults:
            with pytest.raises(OSError):
                ls.save(state, path)
        ...  # the previous checkpoint is intact, nothing is left behind

``short_writes=n`` also makes every ``os.write``, ``os.writev`` and ``os.pwrite`` write at most ``n`` bytes,
as a full pipe or a signal would, to prove callers loop over short writes.
Only one :class:`SyscallFaults` may be active at a time; calls from every
thread are counted.
"""

from __future__ import annotations

import errno as errnos
import os
import threading
from collections.abc import Iterable

from lazystore.sinks.base import byte_view, split_views

__all__ = ["CALLS", "WRITES", "InjectedFault", "SyscallFaults"]

CALLS = ("write", "writev", "pwrite", "fsync", "fdatasync", "replace", "rename")
# The calls that write bytes: ``short_writes`` cuts their data (their second argument).
WRITES = ("write", "writev", "pwrite")


class InjectedFault(OSError):
    """The error :class:`SyscallFaults` raises (an OSError with a real errno)."""


class SyscallFaults:
    """Count the I/O calls made inside the ``with`` block, and fail one of them.

    After the block, ``count`` is the number of calls counted, ``log``
    their names in order, and ``failed`` the ``(k, call)`` of the injected
    failure (None if none).

    Parameters
    ----------
    fail_at : int, optional
        Fail the ``fail_at``-th call (1-based, counting only ``calls``) with
        an :class:`InjectedFault`; None fails none.
    errno : int, optional
        The errno of the failure (EIO by default).
    calls : iterable of str, optional
        The calls counted, among :data:`CALLS` (all of them by default).
    short_writes : int, optional
        Make every ``os.write``, ``os.writev`` and ``os.pwrite`` write at
        most this many bytes.

    Raises
    ------
    ValueError
        ``calls`` names a call that is not in :data:`CALLS`.
    """

    def __init__(self, fail_at: int | None = None, *, errno: int = errnos.EIO, calls: Iterable[str] = CALLS,
                 short_writes: int | None = None) -> None:
        unknown = set(calls) - set(CALLS)
        if unknown:
            raise ValueError(f"cannot inject faults into {sorted(unknown)}; choose from {CALLS}")
        self.fail_at = fail_at
        self.errno = errno
        self.calls = tuple(calls)
        self.short_writes = short_writes
        self.count = 0
        self.log: list[str] = []  # the name of each call counted, in order
        self.failed: tuple[int, str] | None = None  # (k, call) of the injected failure
        self._lock = threading.Lock()
        self._real: dict[str, object] = {}

    def __enter__(self) -> SyscallFaults:
        for name in CALLS:
            real = getattr(os, name)
            self._real[name] = real
            if name in self.calls or (name in WRITES and self.short_writes):
                setattr(os, name, self._wrap(name, real))
        return self

    def __exit__(self, *exc) -> None:
        for name, real in self._real.items():
            setattr(os, name, real)
        self._real.clear()

    def _wrap(self, name: str, real):
        counted = name in self.calls

        def call(*args, **kwargs):
            if counted:
                with self._lock:
                    self.count += 1
                    self.log.append(name)
                    k = self.count
                if k == self.fail_at:
                    self.failed = (k, name)
                    raise InjectedFault(self.errno, f"{os.strerror(self.errno)} (injected: call {k}, os.{name})")
            if name in WRITES and self.short_writes:
                fd, data, *rest = args
                n = self.short_writes
                cut = split_views([byte_view(b) for b in data], n)[0] if name == "writev" else memoryview(data)[:n]
                return real(fd, cut, *rest)
            return real(*args, **kwargs)

        return call
