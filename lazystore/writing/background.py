"""Background saves: snapshot on the caller's thread, write on one worker thread.

A background save (``save_async``) does on the caller's thread only what must
happen before the caller may touch its state again: check everything
(:func:`prepare`), open the target (which checks every writer option), and
copy each tensor leaf into a snapshot buffer (:func:`snapshot`). Encoding,
hashing, writing, fsync and rename then run on the saver's one worker
thread, and a :class:`SaveFuture` reports how it ended.

Why a thread and not a writer process: zstd, xxhash and ``os.write`` release
the GIL, so a worker thread slows the training thread no more than a writer
process doing the same work (on two cores both cost the same CPU time and
memory bandwidth; benchmarks/background.py measures it, figures in
docs/training.md), while a process would need the snapshot copied once more
into shared memory, and its failures carried back across a pipe. The worker
runs at a lower CPU priority and does its chunk work itself instead of
fanning it out to the shared pool (its name starts with "lazystore", which
:func:`lazystore._core.parallel.start_all` runs inline), so a save in the
background takes at most one core, and yields it to the training threads
when they want it.

One save is in flight at a time: the next call waits for it first. So the
buffers of one snapshot are all a saver ever holds (one state's worth), and
saves finish in the order they were made.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from lazystore._core import frameworks, ties, torch_arrays
from lazystore._core.dtypes import spec_for
from lazystore.errors import ShutdownError
from lazystore.views import tree
from lazystore.views.base import ViewBase
from lazystore.writing.writer import Writer

log = logging.getLogger("lazystore")

# How much lower than the caller's the worker's CPU priority is (Linux nice
# steps; a thread may always lower its own priority).
WORKER_NICENESS = 10

T = TypeVar("T")  # what a save's finish returns (its checkpoint's path)


def deprecated_blocking(old: str, new: str) -> None:
    """Warn that ``old(..., blocking=False)`` is deprecated for ``new(...)``
    (the message names the caller's line: two frames up, past ``old``).

    The suite turns these warnings into errors (pyproject.toml), so nothing
    in lazystore or its tests still saves with ``blocking=False``.

    Parameters
    ----------
    old : str
        The deprecated call's function, e.g. ``"lazystore.save"``.
    new : str
        Its replacement, e.g. ``"lazystore.save_async"``.
    """
    warnings.warn(f"{old}(blocking=False) is deprecated: use {new}(...), which takes the same arguments "
                  "and returns the future", DeprecationWarning, stacklevel=3)


@dataclass
class Prepared:
    """A state ready to write: its tree (None for a flat mapping, stored as
    is) and its tensor leaves by key (live objects, or a snapshot's copies)."""

    structure: dict | None
    leaves: Mapping[str, tree.Leaf]  # key -> tensor leaf
    # A flat dict of torch tensors (tree.is_flat_torch): its file says so in
    # its metadata, and names that are another's tensor are aliases of it.
    torch_flat: bool = False
    aliases: dict = field(default_factory=dict)


def prepare(obj, *, check_flat: bool = False) -> Prepared:
    """Check ``obj`` completely (before anything is written) and split it.

    A flat mapping of names to numpy arrays is normally checked by the writer
    as it goes; ``check_flat=True`` checks it here too (names and dtypes),
    for saves whose writing happens later, elsewhere. A flat mapping of
    names to torch tensors is always checked here (dtypes, devices), and its
    aliases found while the tensors are the caller's own."""
    if tree.is_flat_torch(obj):
        tree.flatten(dict(obj))  # one level of str keys: the same checks, the same keys
        return Prepared(None, obj, torch_flat=True, aliases=ties.find_aliases(obj))
    if not tree.is_flat(obj):
        return Prepared(*tree.flatten(obj))
    if check_flat and not isinstance(obj, ViewBase):  # a view's names and dtypes come from a valid file
        tree.flatten(dict(obj))  # one level of str keys: the same checks, the same keys
    return Prepared(None, obj)


# -- snapshots -------------------------------------------------------------------------


class Buffers:
    """Snapshot buffers, kept between saves by leaf key: a state saved again
    with the same keys, shapes and dtypes reuses every one, so steady-state
    saving allocates nothing. GPU tensors get pinned (page-locked) buffers,
    which the device copies into directly. ``keep=False`` keeps none: each
    snapshot's buffers go with it."""

    def __init__(self, keep: bool = True):
        self.keep = keep
        self._held: dict[str, object] = {}  # key -> numpy array, or pinned torch tensor

    def start(self, keys) -> None:
        """Let go of the buffers of keys this snapshot does not have, first."""
        keys = set(keys)
        for key in [k for k in self._held if k not in keys]:
            del self._held[key]

    def array(self, key: str, dtype: np.dtype, shape: tuple) -> np.ndarray:
        buf = self._held.pop(key, None)
        if not (isinstance(buf, np.ndarray) and buf.dtype == dtype and buf.shape == shape):
            del buf  # freed before its replacement is allocated
            buf = np.empty(shape, dtype)
        return self._keep(key, buf)

    def pinned(self, key: str, like):
        torch = torch_arrays.require()
        buf = self._held.pop(key, None)
        if not (isinstance(buf, torch.Tensor) and buf.dtype == like.dtype and buf.shape == like.shape):
            del buf
            # device="cpu": a default device the caller set (torch.set_default_device) must not move it
            buf = torch.empty(like.shape, dtype=like.dtype, device="cpu", pin_memory=True)
        return self._keep(key, buf)

    def clear(self) -> None:
        self._held.clear()

    def _keep(self, key, buf):
        if self.keep:
            self._held[key] = buf
        return buf


def snapshot(prepared: Prepared, buffers: Buffers) -> Prepared:
    """The same state with every tensor leaf copied into ``buffers``: the
    caller may change its own tensors as soon as this returns. Scalars and
    the structure are already captured in ``prepared.structure`` (a new
    JSON tree), so only tensors are copied."""
    leaves = prepared.leaves
    keys = list(leaves.keys())
    buffers.start(keys)
    copies: dict[str, np.ndarray] = {}
    devices: set[object] = set()  # torch.device values (torch is optional: not imported here)
    for key in keys:
        leaf = leaves[key]
        if torch_arrays.is_tensor(leaf):
            copies[key] = _copy_tensor(key, leaf, buffers, devices)
        else:  # a numpy array or scalar (a view's tensors are read from its file here)
            src = np.asarray(leaf)
            copies[key] = buf = buffers.array(key, spec_for(src.dtype).dtype, src.shape)
            np.copyto(buf, src, casting="equiv")  # "equiv": only a byte-order change, never a cast
    if devices:
        torch = torch_arrays.require()
        for device in devices:  # the device-to-host copies were queued without waiting
            torch.cuda.synchronize(device)
    return replace(prepared, leaves=copies)


def _copy_tensor(key: str, t, buffers: Buffers, devices: set) -> np.ndarray:
    t = t.detach()
    if t.device.type == "cuda":
        src = t.resolve_conj().resolve_neg()
        buf = buffers.pinned(key, src)
        buf.copy_(src, non_blocking=True)  # asynchronous from the device into page-locked memory
        devices.add(t.device)
        return torch_arrays.to_numpy(buf)  # shares the pinned memory
    if t.device.type != "cpu":
        return torch_arrays.to_numpy(t)  # moved to the CPU: already a private copy
    src = torch_arrays.to_numpy(t)  # shares the tensor's memory
    buf = buffers.array(key, src.dtype, src.shape)
    np.copyto(buf, src)
    return buf


# -- futures and the worker ---------------------------------------------------------------


class SaveFuture(Future):
    """A background save: ``done()``; ``result(timeout=None)`` gives the
    checkpoint's path or raises the save's error.

    A failure is reported once: to ``result()`` / ``exception()`` if the
    caller asks the future, otherwise to whoever waits on the saver next
    (the next save, ``wait()``, ``close()``). One nobody ever asked about is
    logged when the future is dropped."""

    def __init__(self):
        super().__init__()
        self._reported = False

    def result(self, timeout=None):
        try:
            return super().result(timeout)
        finally:
            if self.done():
                self._reported = True

    def exception(self, timeout=None):
        exc = super().exception(timeout)
        self._reported = True
        return exc

    def take_unreported(self) -> BaseException | None:
        """The save's error if it failed and nobody has been told yet (then
        they have). Call only once done."""
        if self._reported or self.cancelled():
            return None
        self._reported = True
        return super().exception(0)

    def __del__(self):
        try:
            if self.done() and not self._reported and not self.cancelled() and super().exception(0) is not None:
                log.error("a background save failed and nobody asked for its result",
                          exc_info=super().exception(0))
        except Exception:  # noqa: BLE001 - never raise from __del__: at interpreter exit even modules are gone
            pass


class BackgroundSaver:
    """Saves, blocking or not, one at a time, in order.

    ``save(obj, open_writer, finish)`` and ``save_async(...)``:
    ``open_writer()`` opens the target on the caller's thread (checking
    every option) and gives a writer; ``finish(writer, prepared)`` writes
    the state into it, closes it (commit: fsync and rename) and returns the
    result -- on the caller's thread for ``save``, on the worker behind a
    :class:`SaveFuture` for ``save_async``.

    ``serial=True`` (a manager): a blocking save holds the saver until it
    has finished too, so no two saves ever overlap, whatever threads make
    them -- each save reads the folder the one before left. ``on_close``
    runs at the end of :meth:`close`, still holding the saver.
    """

    def __init__(self, *, keep_buffers: bool = True, serial: bool = False, on_close: Callable | None = None):
        # One save call at a time gets past the waiting. Re-entrant, and
        # counted: a signal handler (the SIGTERM recipe of docs/training.md)
        # runs on the main thread, which may be inside save() holding it.
        self._lock = threading.RLock()
        self._depth = 0
        self._buffers = Buffers(keep_buffers)
        self._executor: ThreadPoolExecutor | None = None
        self._pending: SaveFuture | None = None
        self._serial = serial
        self._on_close = on_close

    def save(self, obj: object, open_writer: Callable[[], Any], finish: Callable[[Any, Prepared], T]) -> T:
        """Write ``obj`` before returning, from the caller's own tensors, on
        its thread; after the save in flight, whose failure is raised here."""
        prepared = prepare(obj)  # bad input raises here, before anything else
        with self._opened(open_writer) as writer:
            if self._serial:
                return finish(writer, prepared)
        # Not under the lock: blocking ls.save calls from several threads may overlap.
        return finish(writer, prepared)

    def save_async(self, obj: object, open_writer: Callable[[], Any],
                   finish: Callable[[Any, Prepared], Any]) -> SaveFuture:
        """Snapshot ``obj``'s tensors and write them on the worker: the
        future gives what ``finish`` returns, or raises its error."""
        prepared = prepare(obj, check_flat=True)  # bad input raises here, before anything else
        with self._opened(open_writer) as writer:
            try:
                copy = snapshot(prepared, self._buffers)
            except BaseException:
                writer.abort()
                raise
            return self._submit(finish, writer, copy)

    @contextlib.contextmanager
    def _opened(self, open_writer: Callable[[], Any]) -> Iterator[Any]:
        """Hold the saver, once the save in flight has finished (its
        unreported failure raised), with the target opened."""
        with self._held():
            self._settle()
            yield open_writer()

    def wait(self) -> None:
        """Wait for the save in flight; raise its error if nobody has been told."""
        with self._held() as interrupting:
            if interrupting:
                self._wait_in_flight()  # the call it interrupted settles it
            else:
                self._settle()

    def close(self) -> None:
        """Wait (as :meth:`wait`), then let the worker thread and the buffers go;
        the next save starts them again.

        Called from a signal handler that interrupted a call of this saver
        on the same thread (SIGTERM during ``save``), it only waits for the
        save in flight, which then ends durable: the interrupted call still
        holds the worker and the buffers, and unwinds when the handler exits
        (a save it was starting is then discarded)."""
        with self._held() as interrupting:
            if interrupting:
                self._wait_in_flight()
                return
            try:
                self._settle()
            finally:
                if self._executor is not None:
                    self._executor.shutdown(wait=True)
                    self._executor = None
                self._buffers.clear()
                if self._on_close is not None:
                    self._on_close()

    @contextlib.contextmanager
    def paused(self):
        """Hold the saver for the block, once the save in flight (if any) has
        finished: no save starts or runs meanwhile. A failure of that save
        stays for whoever waits next."""
        with self._held():
            self._wait_in_flight()
            yield

    @contextlib.contextmanager
    def _held(self):
        """Hold the saver; yields whether this call interrupts another of its
        calls on the same thread (a signal handler's)."""
        with self._lock:
            self._depth += 1
            try:
                yield self._depth > 1
            finally:
                self._depth -= 1

    def _wait_in_flight(self) -> None:
        """Wait for the save in flight, if any, leaving its outcome to whoever settles it."""
        pending = self._pending
        if pending is not None:
            wait_all([pending])

    @property
    def busy(self) -> bool:
        """Is a save in flight?"""
        pending = self._pending
        return pending is not None and not pending.done()

    def _settle(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        wait_all([pending])  # not pending.result(): that would count as telling the caller
        error = pending.take_unreported()
        if error is not None:
            raise error

    def _submit(self, finish, writer, prepared: Prepared) -> SaveFuture:
        if self._executor is None:
            # Named lazystore-*: parallel.start_all then does chunk work inline, on this one thread.
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="lazystore-save", initializer=_lower_priority)
        future = SaveFuture()
        self._pending = future  # busy from now on: before the worker can rename anything
        try:
            self._executor.submit(_run, future, finish, writer, prepared)
        except BaseException as exc:  # e.g. at interpreter shutdown: nothing will ever run it
            self._pending = None
            writer.abort()
            if isinstance(exc, RuntimeError) and "shutdown" in str(exc):
                # concurrent.futures refuses new work once the interpreter is
                # shutting down (atexit handlers run after that), and says so
                # in terms of its own futures; say what to do instead.
                raise ShutdownError(
                    f"cannot save {os.fspath(writer.path)} in the background: the interpreter is shutting down (a save "
                    "from an atexit handler?) and no thread can be started. Save with save() there (not save_async), "
                    "or save and close() the manager before the program ends") from exc
            raise
        return future


def _run(future: SaveFuture, finish, writer, prepared: Prepared) -> None:
    if not future.set_running_or_notify_cancel():
        writer.abort()  # cancelled before it started: nothing is written
        return
    try:
        result = finish(writer, prepared)
    except BaseException as exc:  # noqa: BLE001 - handed to the future, raised to whoever waits
        future.set_exception(exc)
    else:
        future.set_result(result)


def _lower_priority() -> None:
    try:  # Linux: the nice value of this thread alone
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICENESS)
    except (AttributeError, OSError):
        pass  # elsewhere the worker runs at the caller's priority


# ls.save_async without a manager: one worker for the process,
# and no buffers kept (nothing would free them).
DEFAULT = BackgroundSaver(keep_buffers=False)


def write_prepared(w, prepared: Prepared, system_metadata: Mapping | None = None):
    """Write a prepared state (see :func:`prepare`) into an open
    writer and close it, with reserved metadata entries for lazystore's own
    layers; an error discards the writer's file. Returns the written path.

    A flat dict of torch tensors gets the reserved entry saying so, and in
    a lazystore file each alias
    is recorded instead of stored again; a safetensors file, which has no
    such records, stores it whole."""
    structure = prepared.structure
    aliases = prepared.aliases if isinstance(w, Writer) else {}  # only lazystore files record aliases
    with w:
        if structure is not None:
            w.system_metadata[tree.TREE_KEY] = structure
        if prepared.torch_flat:
            w.system_metadata[frameworks.FRAMEWORK_KEY] = frameworks.TORCH
        if aliases:
            w.system_metadata[ties.KEY] = ties.encode(aliases)
        w.system_metadata.update(system_metadata or {})
        for key, leaf in prepared.leaves.items():
            if key not in aliases:
                # One leaf at a time: a GPU tensor's CPU copy lives only while it is written.
                w.add(key, tree.as_array(leaf))
    return w.path
