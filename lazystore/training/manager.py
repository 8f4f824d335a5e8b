"""CheckpointManager: numbered training checkpoints in one folder, with retention.

Each checkpoint is one lazystore file, ``step-000000000123.lzy`` (the step
zero-padded to 12 digits), written by :func:`lazystore.save`: atomically
and durably, so a crash mid-save leaves only a hidden temporary file that is
never listed. The step's metrics are stored in the checkpoint itself (the
reserved metadata member ``__lazystore_manager__``), so the history -- which
steps exist, their metrics, which one is best -- is rebuilt from the files
alone by any manager opened on the folder.

Saves can run in the background (:meth:`CheckpointManager.save_async`): the state is
snapshotted on the caller's thread and written by the manager's worker
thread (:mod:`~lazystore.writing.background`), one save at a time.

One manager saves into a folder at a time, and any number may read it: a
manager holds the folder's lock file from its first save to ``close()``
(:mod:`~lazystore.training.saver_lock`), and within it saves never
overlap, whatever threads make them. A damaged checkpoint in the folder
costs that checkpoint, never the next save
(:mod:`~lazystore.training.damage`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

from lazystore._core import crypto_digest
from lazystore._core.aead import resolve_key
from lazystore._native.base_ref import MAX_CHAIN
from lazystore.api.types import Key
from lazystore.codecs import codec_for
from lazystore.errors import InvalidInputError
from lazystore.sinks import fsync_dir
from lazystore.training import chains, entries, rebasing, reverse, saver_lock
from lazystore.training.reading import CheckpointReading
from lazystore.training.step_files import StepFiles
from lazystore.writing import background
from lazystore.writing.writer import Writer

log = logging.getLogger("lazystore")
# The most checkpoints per keyframe (the keyframe and the deltas coded
# against it, directly or not); delta_depth usually ends a chain sooner. A
# bound keeps what one damaged keyframe takes down, and the work of
# rebasing at retention, bounded.
DEFAULT_KEYFRAME_EVERY = 16


class CheckpointManager(CheckpointReading):
    """Save training state every so often; keep the last and the best.

    >>> mgr = CheckpointManager("ckpts", keep_last=3, keep_best=1, metric="val_loss")  # doctest: +SKIP
    >>> mgr.save(step, state, metrics={"val_loss": 0.42})                              # doctest: +SKIP
    >>> state = mgr.restore()            # the latest step                               # doctest: +SKIP
    >>> with CheckpointManager("ckpts", keep_last=3) as mgr:                               # doctest: +SKIP
    ...     future = mgr.save_async(step, state)  # returns once the state is copied

    Retention (applied after each save, once the new checkpoint is durable):
    ``keep_last=N`` keeps the N highest steps; ``keep_best=N`` keeps the N
    steps with the best value of ``metric`` (lowest for ``mode="min"``,
    highest for ``"max"``; ties go to the earlier step; NaN is never best).
    A checkpoint kept by either rule stays. With neither, nothing is deleted.

    ``delta=True`` keeps the newest checkpoint whole and older ones as
    delta files (format 1.3) against newer ones: each save writes its step
    whole, then codes the checkpoint before it against it (in the
    background too with :meth:`save_async`), so unchanged tensors are
    stored once, in the newest file, and the latest restores at the speed
    of a standalone file. Older checkpoints form chains ending in a whole
    one: a restore decodes at most ``delta_depth`` checkpoints' worth of
    changed bytes beyond it (2: three files when every weight changes; a
    frozen base with changing adapters costs little per level), and a
    chain holds at most ``keyframe_every`` checkpoints. Retention never
    deletes a base that a kept checkpoint needs: such checkpoints are
    rewritten first (against a kept base, or a keyframe), atomically.
    Every checkpoint still opens with :func:`lazystore.open` and the
    command line. See :mod:`lazystore.training.reverse` and
    docs/training.md, "Delta checkpoints".

    One saver per folder: the first save takes the folder's lock file
    (``.lazystore-manager.lock``) until :meth:`close`; a second manager (in
    this process or another) that tries to save meanwhile gets
    :class:`~lazystore.FolderLockedError` at once. Reading needs no lock.

    ``digest`` (``"blake3"`` or ``"sha256"``) records a cryptographic
    digest of every chunk in every file the manager writes, delta files
    included (format 1.4; see :class:`~lazystore.Writer`).

    Damaged checkpoints (a file that cannot be read or whose bytes fail
    their checksums) never stop a save: they are logged once (logger
    ``lazystore``), listed by :meth:`damaged`, never used as a base, never
    rewritten and never deleted by retention, which keeps ``keep_last`` /
    ``keep_best`` intact checkpoints around them. See docs/training.md,
    "Damaged checkpoints".

    ``encryption_key`` (32 bytes, or a callable returning them, called once
    per save and per restore or open) encrypts every checkpoint as
    :func:`lazystore.save` does, and reads them back; it cannot be combined
    with ``delta=True`` (sealed deltas are not supported).

    Parameters
    ----------
    directory : str or os.PathLike
        The folder of the checkpoints (created if missing).
    keep_last : int, optional
        Keep the checkpoints of the N highest steps.
    keep_best : int, optional
        Keep the N checkpoints with the best ``metric``.
    metric : str, optional
        The metric that ranks checkpoints (needed by ``keep_best`` and :meth:`best`).
    mode : {"min", "max"}, optional
        Whether the lowest or the highest value of ``metric`` is best.
    compression : {None, "auto", "zstd", "huffman"}, optional
        How each checkpoint's tensors are stored, as for :func:`lazystore.save`.
    delta : bool, optional
        Keep older checkpoints as delta files against newer ones.
    keyframe_every : int, optional
        The most checkpoints in one chain of deltas.
    delta_depth : int, optional
        The most checkpoints a restore decodes beyond a whole one.
    digest : {None, "blake3", "sha256"}, optional
        Record a cryptographic digest of every chunk.
    encryption_key : bytes or callable, optional
        Encrypt every checkpoint with this key (or what the callable returns).

    Raises
    ------
    InvalidInputError
        A bad argument (a count below 1, ``keep_best`` without ``metric``, an
        unknown mode or compression, ``encryption_key`` with ``delta=True``).
    """

    def __init__(self, directory: str | os.PathLike, *, keep_last: int | None = None, keep_best: int | None = None,
                 metric: str | None = None, mode: str = "min", compression: str | None = None, delta: bool = False,
                 keyframe_every: int = DEFAULT_KEYFRAME_EVERY, delta_depth: int = chains.DEFAULT_DEPTH,
                 digest: str | None = None, encryption_key: Key | None = None) -> None:
        self.keep_last = entries.count("keep_last", keep_last)
        self.keep_best = entries.count("keep_best", keep_best)
        if metric is not None and not isinstance(metric, str):
            raise InvalidInputError(f"metric must be the str name of a metric, got {metric!r}")
        if self.keep_best is not None and metric is None:
            raise InvalidInputError("keep_best needs metric=: the name of the metric that ranks checkpoints")
        if mode not in ("min", "max"):
            raise InvalidInputError(f"mode must be 'min' or 'max', got {mode!r}")
        self.metric = metric
        self.mode = mode
        codec_for(compression)  # an unknown compression fails here, not at the first save
        self.compression = compression
        # Every file this manager writes (its saves, and the rewrites of older
        # checkpoints as deltas) records chunk digests with this algorithm.
        self.digest = crypto_digest.writer_digest(digest)
        if not isinstance(delta, bool):
            raise InvalidInputError(f"delta must be True or False, got {delta!r}")
        self.delta = delta
        if encryption_key is not None and delta:
            raise InvalidInputError("encryption_key cannot be combined with delta=True: sealed (encrypted) deltas "
                                    "are not supported, since a delta records checksums of its base's plaintext")
        # Kept as given (a callable is called on each use); bytes are checked now.
        self._encryption_key = encryption_key if callable(encryption_key) else resolve_key(encryption_key)
        self.keyframe_every = entries.count("keyframe_every", keyframe_every)
        self.delta_depth = entries.count("delta_depth", delta_depth)
        if self.delta_depth is None or self.delta_depth > MAX_CHAIN:  # a restore reads delta_depth bases
            raise InvalidInputError(f"delta_depth must be an int from 1 to {MAX_CHAIN}, got {delta_depth!r}")
        self.directory = Path(os.fspath(directory))
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Its checkpoint files: paths, cached index facts and metrics, known damage.
        self.files = StepFiles(self.directory)
        # Held from the first save to close(): one saving manager per folder.
        self._folder_lock = saver_lock.SaverLock(self.directory)
        # Saves, in order, one at a time (blocking ones from several threads
        # too); its snapshot buffers are reused from save to save.
        self._saver = background.BackgroundSaver(serial=True, on_close=self._folder_lock.release)
        self._writing: int | None = None  # the step being saved, hidden until it is durable

    # -- writing ---------------------------------------------------------------

    @overload
    def save(self, step: int, state: object, *, metrics: Mapping[str, Any] | None = None,
             blocking: Literal[True] = True) -> Path: ...

    @overload  # deprecated: save_async replaces it
    def save(self, step: int, state: object, *, metrics: Mapping[str, Any] | None = None,
             blocking: bool) -> Path | Future[Path]: ...

    def save(self, step: int, state: object, *, metrics: Mapping[str, Any] | None = None,
             blocking: bool = True) -> Path | Future[Path]:
        """Write ``state`` as checkpoint ``step``, then apply retention; return its path.

        ``state`` is anything :func:`lazystore.save` takes; a checkpoint of
        the same step is replaced. The file is durable and retention applied
        when this returns; :meth:`save_async` does the writing in the
        background. A save while a background one is in flight first waits
        for it, and raises its error if nobody has seen it (then nothing new
        is saved).

        Parameters
        ----------
        step : int
            The step, at least 0: the file is ``step-<12 digits>.lzy``.
        state : Mapping or nested state
            The training state.
        metrics : Mapping, optional
            Names to numbers (int, float -- inf and nan too --, numpy
            scalars, one-element arrays or tensors), stored in the checkpoint.
        blocking : bool, optional
            Deprecated. True (the default) changes nothing; ``blocking=False``
            warns DeprecationWarning and returns what :meth:`save_async`
            returns: call that instead.

        Returns
        -------
        pathlib.Path
            The checkpoint's file (with the deprecated ``blocking=False``, the
            future :meth:`save_async` returns).

        Raises
        ------
        InvalidInputError
            A bad step, metrics or state; nothing is written.
        FolderLockedError
            Another manager saves into the folder.
        """
        if not blocking:
            background.deprecated_blocking("lazystore.CheckpointManager.save", "CheckpointManager.save_async")
            return self.save_async(step, state, metrics=metrics)
        return self._saver.save(state, *self._writing_step(step, metrics))

    def save_async(self, step: int, state: object, *, metrics: Mapping[str, Any] | None = None) -> Future[Path]:
        """Start writing ``state`` as checkpoint ``step`` in the background; return a future at once.

        The call returns as soon as the state is checked and its tensors
        copied into the manager's snapshot buffers: the caller may change
        the state at once. Writing, retention included, happens on the
        manager's worker thread, one save at a time, in order. A save while
        another is in flight first waits for it, and raises its error if
        nobody has seen it (then nothing new is saved). Bad input always
        raises here.

        Parameters
        ----------
        step : int
            As for :meth:`save`.
        state : Mapping or nested state
            As for :meth:`save`.
        metrics : Mapping, optional
            As for :meth:`save`.

        Returns
        -------
        concurrent.futures.Future
            ``result()`` gives the checkpoint's path once it is durable and
            retention applied, or raises the save's error.

        Raises
        ------
        InvalidInputError
            What :meth:`save` refuses, raised at the call: nothing goes to the background.
        FolderLockedError
            At the call, as for :meth:`save`.
        """
        return self._saver.save_async(state, *self._writing_step(step, metrics))

    def _writing_step(self, step: int, metrics: Mapping[str, Any] | None
                      ) -> tuple[Callable[[], Writer], Callable[[Writer, background.Prepared], Path]]:
        """Check ``step`` and ``metrics``; give what opens checkpoint ``step``'s
        writer and what writes the state into it, then applies retention."""
        step = entries.step_number(step)
        metrics = entries.checked_metrics(metrics)
        path = self.path(step)
        entry = entries.encode(step, metrics)

        def open_writer() -> Writer:
            # The save before has finished (and its retention): the folder is settled.
            self._folder_lock.acquire()  # or FolderLockedError: another manager saves here
            self._prepare_replace(step)
            self._writing = step
            try:
                return Writer(path, compression=self.compression, digest=self.digest,  # whole: never a delta
                              encryption_key=self._encryption_key)
            except BaseException:
                self._writing = None
                raise

        def finish(writer: Writer, prepared: background.Prepared) -> Path:
            try:
                background.write_prepared(writer, prepared, {entries.MANAGER_KEY: entry})
            finally:
                self._writing = None  # durable now, or failed (leaving what was there)
            with self._lock:
                # The new checkpoint is durable: only now may older ones go,
                # and then the one before it be coded against it.
                self.files.forget(step)
                self.files.remember_metrics(step, metrics)
                self._apply_retention()
                if self.delta:
                    reverse.after_save(self, step)
            return path

        return open_writer, finish

    def wait(self) -> None:
        """Wait until no save is in flight.

        Raises
        ------
        Exception
            The error of a failed background save nobody has seen yet (its
            future's ``result()`` counts as seeing it).
        """
        self._saver.wait()

    def close(self) -> None:
        """Wait as :meth:`wait` does, then free the worker thread, the snapshot buffers and the folder's lock.

        Another manager may save into the folder from then on. This one
        stays usable: a later save takes them again.

        A SIGTERM handler that calls ``close()`` lets an in-flight
        background save finish (durable and listed) before the process
        ends; see docs/training.md, "Stopping: SIGTERM and exit".

        Raises
        ------
        Exception
            As :meth:`wait` does.
        """
        self._saver.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        try:  # the body's error propagates; a save's failure is added to it, not lost
            self.close()
        except Exception as save_error:  # reported as a note on the error already raised
            if hasattr(exc, "add_note"):
                exc.add_note(f"also, a background save failed: {save_error!r}")
            else:
                log.error("a background save failed", exc_info=save_error)

    def __repr__(self) -> str:
        return (f"CheckpointManager({os.fspath(self.directory)!r}, keep_last={self.keep_last}, "
                f"keep_best={self.keep_best}, metric={self.metric!r}, mode={self.mode!r})")

    # -- internals -----------------------------------------------------------------

    def _in_flight(self) -> int | None:
        """The step a background save is writing (None when none is in flight:
        a blocking save's caller is waiting for it anyway, and a save whose
        snapshot failed never started)."""
        writing = self._writing
        return writing if self._saver.busy else None

    def _prepare_replace(self, step: int) -> None:
        """Before checkpoint ``step`` is saved again: rewrite what depends on it."""
        steps = self.steps()
        if step in steps:
            with self._lock:
                rebasing.rebase_dependents(self, [step], set(steps) - {step}, replacing=True)

    def _apply_retention(self) -> None:
        if self.keep_last is None and self.keep_best is None:
            return  # nothing is ever deleted
        steps = self.steps()
        chains.Series(self, steps)  # opens every index (cached): one that cannot be opened is noted damaged
        ranked = self._ranked(steps) if self.keep_best is not None else []
        # A damaged checkpoint is left in place, and counts for no rule: the
        # rules keep that many intact checkpoints (as far as is known).
        damaged = self.files.known_damaged(steps)
        intact = [s for s in steps if s not in damaged]
        keep = set(damaged)
        if self.keep_last is not None:
            keep.update(intact[-self.keep_last:])
        if self.keep_best is not None:
            keep.update([s for s in ranked if s not in damaged][: self.keep_best])
        doomed = [step for step in steps if step not in keep]
        # No kept checkpoint may lose its base: its dependents are rewritten
        # first; and no base a damaged checkpoint names goes.
        deletable = rebasing.rebase_dependents(self, doomed, keep)
        removed = False
        for step in rebasing.deletion_order(self, [s for s in doomed if s in deletable]):
            self.files.remove(step)
            removed = True
        # (Temporary files of saves that crashed are removed by the writer
        # at the start of every save into this folder.)
        if removed:
            fsync_dir(self.directory)
