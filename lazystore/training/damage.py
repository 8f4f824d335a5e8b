"""Damaged checkpoints in a manager folder: one bad file costs that file,
never the next save.

A checkpoint is **damaged** when reading it, or a file in its chain of
bases, fails: it cannot be opened (truncated, empty, a folder or a dangling
link where the file should be, unreadable), or its bytes fail their
checksums. Any lazystore error or ``OSError`` from reading an old step
counts. The manager finds damage as it reads old checkpoints for its own
work (their index, for metrics and bases; every byte of a base a delta is
coded against, as it is coded, and of a checkpoint it rewrites) and when asked
(:meth:`CheckpointManager.damaged` checks every byte of every step).

What the manager then does (docs/training.md, "Damaged checkpoints"):

* it logs one warning per damaged file (logger ``lazystore``), naming it;
* a damaged checkpoint is never a base: the save becomes a keyframe;
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


def keyframe_instead(mgr, step: int, base: Path | None, exc: Exception) -> bool:
    """Should a save of ``step`` that failed with ``exc`` while coding a
    delta against ``base`` be written again as a keyframe? Yes when the base
    is damaged (noted, and warned about). Coding a delta reads every base
    byte it uses, checked, so that is the base's check: checking it up front
    as well cost every delta save a second read of its base."""
    if base is None or not base_failed(mgr, base.name):
        return False
    log.warning("step %d is saved as a keyframe instead: its base %s is damaged (%s)", step, base, exc)
    return True


def base_failed(mgr, base_file: str) -> bool:
    """Did a save's base, the checkpoint named ``base_file`` in ``mgr``'s
    folder, fail (rather than the save itself)? Checks every byte of it and
    of its chain, noting what fails as :func:`usable_base` does."""
    names = {mgr.path(s).name: s for s in mgr.steps()}
    step = names.get(base_file)
    return step is not None and not usable_base(mgr, step)


def usable_base(mgr, step: int) -> bool:
    """May checkpoint ``step`` of manager ``mgr`` be a base? Checks every
    byte of it and of its chain; one that fails is noted damaged, and so is
    each file of its chain that fails on its own (the warning then names
    the culprit, not only what depends on it)."""
    reason = check(mgr.path(step))
    if reason is None:
        return True
    mgr._note_damage(step, reason)
    names = {mgr.path(s).name: s for s in mgr.steps()}
    seen, s = {step}, step
    while True:
        try:
            s = names.get(mgr._base_name(s))
        except READ_ERRORS:
            break
        if s is None or s in seen:
            break
        seen.add(s)
        below = check(mgr.path(s))
        if below is not None:
            mgr._note_damage(s, below)
    return False


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
