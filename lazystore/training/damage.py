"""Damaged checkpoints in a manager folder: one bad file costs that file,
never the next save.

A checkpoint is **damaged** when reading it, or a file in its chain of
bases, fails: it cannot be opened (truncated, empty, a folder or a dangling
link where the file should be, unreadable), or its bytes fail their
checksums. Any lazystore error or ``OSError`` from reading an old step
counts. The manager finds damage as it reads old checkpoints for its own
work (their index, for metrics and bases; every byte of a checkpoint it
rewrites, and of the base it codes it against) and when asked
(:meth:`CheckpointManager.damaged` checks every byte of every step).

What the manager then does (docs/training.md, "Damaged checkpoints"):

* it logs one warning per damaged file (logger ``lazystore``), naming it;
* a damaged checkpoint is never a base (saves are whole files anyway, and
  the previous checkpoint is coded against a new one only if it reads back
  checked: :mod:`lazystore.training.reverse`);
* it is never rewritten (that would give bytes that failed their checks
  fresh checksums) and never deleted by retention: it stays, with the bases
  it names, for a person to look at or delete; it counts for neither
  ``keep_last`` nor ``keep_best``, so retention keeps that many intact ones.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from lazystore import api
from lazystore._core.naming import naming
from lazystore.errors import LazyStoreError

log = logging.getLogger("lazystore")

# What reading an old checkpoint may raise when its file is damaged.
READ_ERRORS = (LazyStoreError, OSError)


class Damaged(Exception):
    """Raised inside a rewrite when its input turns out damaged: the step
    and why. Caught by the rebasing loop, which plans again around it."""

    def __init__(self, step: int, reason: str):
        super().__init__(reason)
        self.step = step
        self.reason = reason


def describe(path: Path, exc: BaseException) -> str:
    """Why ``path`` is damaged, in words that name it."""
    text = str(exc) or type(exc).__name__
    name = os.fspath(path)
    return f"{type(exc).__name__}: {text}" if name in text else f"{name}: {type(exc).__name__}: {text}"


def identity(path: Path) -> tuple | None:
    """What a file is now (the link itself, not what it points to): a
    damaged file replaced or repaired since is checked again."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_ino, st.st_mtime_ns, st.st_size)


def check(path: Path) -> str | None:
    """Why the checkpoint at ``path`` is damaged, or None if every byte of
    it and of its chain of bases passes its checks (reads them all)."""
    try:
        with naming(path), api.open(path, verify=True) as ck:
            failing = ck.verify()
    except READ_ERRORS as exc:
        return describe(path, exc)
    if failing:
        shown = ", ".join(repr(n) for n in failing[:5]) + (", ..." if len(failing) > 5 else "")
        return (f"{os.fspath(path)}: {len(failing)} tensor(s) fail their checksums, "
                f"in the file or in its chain of bases: {shown}")
    return None


class DamageLog:
    """The checkpoints a manager knows to be damaged, each with why; warns
    once per damaged file. A file that changes (saved again, repaired,
    deleted) is forgotten: what it is now is checked afresh."""

    def __init__(self):
        self._lock = threading.Lock()
        self._found: dict[int, tuple[tuple | None, str]] = {}  # step -> (identity, reason)

    def note(self, step: int, path: Path, reason: str) -> None:
        key = identity(path)
        with self._lock:
            old = self._found.get(step)
            self._found[step] = (key, reason)
        if old is None or old[0] != key:
            log.warning("checkpoint step %d is damaged and is left as it is (never a base, never "
                        "rewritten, never deleted by retention): %s", step, reason)

    def known(self, steps, path_of) -> dict[int, str]:
        """Of ``steps``, those known to be damaged as their files are now."""
        with self._lock:
            found = dict(self._found)
        out = {}
        for step in steps:
            entry = found.get(step)
            if entry is not None and entry[0] == identity(path_of(step)):
                out[step] = entry[1]
        return out

    def forget(self, step: int) -> None:
        with self._lock:
            self._found.pop(step, None)
