"""A manager folder's checkpoint files, step by step.

Where each step's file is, what its index says (its base, its format
version, the share of its bytes that changed: :class:`chains.Facts`) and
its metrics, both cached until the file changes; which files are known to
be damaged; and removing one. The manager owns one (``mgr.files``), and its
companion modules (:mod:`chains`, :mod:`rebasing`, :mod:`reverse`) work
through it rather than through the manager's internals.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from lazystore.training import chains, damage


def checkpoint_name(step: int) -> str:
    """The file name of a step's checkpoint: ``step-000000000123.lzy``."""
    return f"step-{step:012d}.lzy"


def stat_key(path: Path) -> tuple:
    """What a cached reading of ``path`` is valid for: the same inode,
    modification time and size."""
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class StepFiles:
    """The checkpoint files of one manager folder (see the module docstring)."""

    def __init__(self, directory: Path):
        self.directory = directory
        # step -> (stat_key, value): read again once the file changes.
        self._facts: dict[int, tuple[tuple, chains.Facts]] = {}
        self._metrics: dict[int, tuple[tuple, dict]] = {}
        self._damage = damage.DamageLog()

    def path(self, step: int) -> Path:
        return self.directory / checkpoint_name(step)

    def facts(self, step: int) -> chains.Facts:
        """What step's index says about its place in a delta series."""
        path = self.path(step)
        key = stat_key(path)
        cached = self._facts.get(step)
        if cached is None or cached[0] != key:
            cached = self._facts[step] = (key, chains.facts_of(path))
        return cached[1]

    def base_name(self, step: int) -> str | None:
        """The file name of checkpoint ``step``'s base (None: a keyframe)."""
        return self.facts(step).base

    def metrics(self, step: int, read: Callable[[Path], dict]) -> dict:
        """Step's metrics, ``read(its path)`` unless cached for the file as it is now."""
        path = self.path(step)
        key = stat_key(path)
        cached = self._metrics.get(step)
        if cached is None or cached[0] != key:
            cached = self._metrics[step] = (key, read(path))
        return cached[1]

    def remember_metrics(self, step: int, metrics: dict) -> None:
        """Metrics just written with ``step``'s file: no need to read them back."""
        self._metrics[step] = (stat_key(self.path(step)), metrics)

    def note_damage(self, step: int, reason: str) -> None:
        """Step's file is damaged, for ``reason`` (logged once per file)."""
        self._damage.note(step, self.path(step), reason)

    def known_damaged(self, steps) -> dict[int, str]:
        """Of ``steps``, those known to be damaged as their files are now, with why."""
        return self._damage.known(steps, self.path)

    def remove(self, step: int) -> None:
        """Delete checkpoint ``step`` (the caller fsyncs the folder)."""
        self.path(step).unlink(missing_ok=True)
        self.forget(step)

    def forget(self, step: int) -> None:
        """Checkpoint ``step`` was deleted or written again."""
        self._metrics.pop(step, None)
        self._facts.pop(step, None)
