"""The read side of a :class:`~lazystore.training.manager.CheckpointManager`:
listing, ranking and reading the checkpoints of its folder.

Reading needs no lock: any number of managers (in any process) may read a
folder while one saves into it. A checkpoint deleted meanwhile, by another
process's retention, is :class:`~lazystore.CheckpointNotFoundError`; a
damaged one raises the error of reading it, naming its file.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lazystore import api
from lazystore.api.types import Key
from lazystore.errors import CheckpointNotFoundError, InvalidInputError
from lazystore.training import damage, entries
from lazystore.training.step_files import StepFiles, checkpoint_name
from lazystore.views.base import ViewBase
from lazystore.writing.background import BackgroundSaver

_FILE = re.compile(r"step-(\d{12,})\.lzy")


class CheckpointReading:
    """The methods of :class:`~lazystore.CheckpointManager` that read its folder.

    A base of the manager, which sets what they read: its ``directory``,
    its checkpoint ``files``, ``metric`` and ``mode``, the key of its
    checkpoints, its saver, and which step it is saving.
    """

    directory: Path
    files: StepFiles
    metric: str | None
    mode: str
    _encryption_key: Key | None
    _saver: BackgroundSaver

    def _in_flight(self) -> int | None:
        """The step being saved in the background (None: none); the manager's."""
        raise NotImplementedError

    def steps(self) -> list[int]:
        """The retained steps, sorted, read from the folder on each call.

        The step this manager is saving is left out until it is durable.

        Returns
        -------
        list of int
            The steps with a checkpoint in the folder.
        """
        writing = self._in_flight()
        steps = []
        for name in os.listdir(self.directory):
            m = _FILE.fullmatch(name)
            if m and name == checkpoint_name(int(m.group(1))) and int(m.group(1)) != writing:
                steps.append(int(m.group(1)))
        return sorted(steps)

    def latest(self) -> int | None:
        """The highest retained step, or None.

        Returns
        -------
        int or None
            The latest step; None when the folder holds no checkpoint.
        """
        steps = self.steps()
        return steps[-1] if steps else None

    def best(self) -> int | None:
        """The retained step with the best value of ``metric``.

        Returns
        -------
        int or None
            The best step (ties: the earlier); None if no checkpoint has a
            (non-NaN) value for ``metric``.

        Raises
        ------
        InvalidInputError
            The manager was created without ``metric=``.
        """
        if self.metric is None:
            raise InvalidInputError("best() needs a manager created with metric=")
        ranked = self._ranked(self.steps())
        return ranked[0] if ranked else None

    def metrics(self, step: int) -> dict[str, Any]:
        """The metrics saved with ``step``.

        Parameters
        ----------
        step : int
            A retained step.

        Returns
        -------
        dict
            Metric names to the numbers saved (int or float).

        Raises
        ------
        CheckpointNotFoundError
            No checkpoint of that step is retained.
        """
        return dict(self._metrics(self._existing(step)))

    def path(self, step: int) -> Path:
        """Where checkpoint ``step`` is (or would be) stored.

        Parameters
        ----------
        step : int
            The step, at least 0.

        Returns
        -------
        pathlib.Path
            ``directory / "step-<12 digits>.lzy"``.

        Raises
        ------
        InvalidInputError
            A step that is not an int of at least 0.
        """
        return self.files.path(entries.step_number(step))

    def restore(self, step: int | None = None, *, map_location: Any = None, verify: bool = True) -> Any:
        """Load a checkpoint (the latest by default) as :func:`lazystore.load` does.

        Every tensor is checked against its checksums unless ``verify=False``.

        Parameters
        ----------
        step : int, optional
            The step to restore; the latest when None.
        map_location : str or torch.device, optional
            Where torch tensors go, as for :func:`lazystore.load`.
        verify : bool, optional
            Check every raw tensor against its checksums (the default).

        Returns
        -------
        dict or nested state
            The state as it was saved.

        Raises
        ------
        CheckpointNotFoundError
            No checkpoint of that step (or none at all), or one deleted
            meanwhile (by another process's retention, say).
        ChecksumError
            A damaged checkpoint raises the error of reading it, naming its file.
        """
        step = self._resolve(step)
        with self._reading(step) as path:
            return api.load(path, map_location=map_location, verify=verify, encryption_key=self._encryption_key)

    def open(self, step: int | None = None) -> ViewBase:
        """Open a checkpoint (the latest by default) lazily, as :func:`lazystore.open` does.

        Parameters
        ----------
        step : int, optional
            The step to open; the latest when None.

        Returns
        -------
        ViewBase
            The checkpoint's view; close it when done.

        Raises
        ------
        CheckpointNotFoundError
            No checkpoint of that step, or none at all.
        """
        step = self._resolve(step)
        with self._reading(step) as path:
            return api.open(path, encryption_key=self._encryption_key)

    def damaged(self) -> dict[int, str]:
        """The listed steps whose checkpoint is damaged, each with why.

        A checkpoint is damaged when it cannot be read, or bytes of it or of
        its chain of bases fail their checksums. Checks every byte of every
        listed checkpoint not already known to be damaged (as costly as
        restoring each), after the save in flight, if any, has finished.
        Each newly found one is also logged as a warning.

        Returns
        -------
        dict of int to str
            Damaged steps, each with the reason (the message names the file).
        """
        with self._saver.paused():  # no save of ours rewrites a file under the check
            steps = self.steps()
            known = self.files.known_damaged(steps)
            found = {}
            for step in steps:
                reason = known.get(step) or damage.check(self.path(step))
                if reason is not None:
                    self.files.note_damage(step, reason)
                    found[step] = reason
            return found

    def _resolve(self, step: int | None) -> int:
        if step is None:
            latest = self.latest()
            if latest is None:
                raise CheckpointNotFoundError(f"no checkpoints in {os.fspath(self.directory)}")
            return latest
        return self._existing(step)

    def _existing(self, step: int) -> int:
        step = entries.step_number(step)
        # lexists: a damaged entry (a folder, a dangling link) is listed, and reading it says what is wrong.
        if step == self._in_flight() or not os.path.lexists(self.path(step)):
            raise CheckpointNotFoundError(
                f"no checkpoint for step {step} in {os.fspath(self.directory)}; retained steps: {self.steps()}")
        return step

    def _metrics(self, step: int) -> dict:
        with self._reading(step):  # its errors name the file; deleted meanwhile: not found
            return self.files.metrics(step, entries.read_metrics)

    @contextlib.contextmanager
    def _reading(self, step: int) -> Iterator[Path]:
        """Read checkpoint ``step`` in the block (given its path): its errors
        name the file, and a file deleted meanwhile is CheckpointNotFoundError."""
        path = self.path(step)
        try:
            with damage.naming(path):
                yield path
        except FileNotFoundError:
            if os.path.lexists(path):
                raise  # a dangling link: damaged, and the error names it
            raise CheckpointNotFoundError(
                f"checkpoint step {step} ({os.fspath(path)}) was deleted while it was being read "
                f"(retention, or another process); retained steps: {self.steps()}") from None

    def _ranked(self, steps: list[int]) -> list[int]:
        """Steps with a value for ``metric``, best first (ties: earlier step
        first). One whose metrics cannot be read is noted damaged, and unranked."""
        scored = []
        for step in steps:
            try:
                value = self._metrics(step).get(self.metric)
            except CheckpointNotFoundError:
                continue
            except damage.READ_ERRORS as exc:
                self.files.note_damage(step, damage.describe(self.path(step), exc))
                continue
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                scored.append((value if self.mode == "min" else -value, step))
        return [step for _, step in sorted(scored)]
