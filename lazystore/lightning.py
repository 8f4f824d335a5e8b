"""PyTorch Lightning's checkpoint I/O, in lazystore files.

>>> trainer = Trainer(plugins=[LazyStoreCheckpointIO()])                    # doctest: +SKIP
>>> trainer = Trainer(plugins=[LazyStoreCheckpointIO(blocking=False)])      # doctest: +SKIP
>>> trainer = Trainer(plugins=[AsyncCheckpointIO(LazyStoreCheckpointIO())])  # doctest: +SKIP

Lightning's checkpoint dict (weights, optimizer and scheduler states, loop
progress, callback states, hyper-parameters) is saved with
:func:`lazystore.save` and loaded with :func:`lazystore.load`: no pickle,
so ``weights_only`` is moot (loading never runs code), and every value must
be one lazystore stores (hyper-parameters included: convert paths,
namespaces or config objects to dicts, lists, strings and numbers first).

``blocking=False`` saves in the background (``ls.save(..., blocking=False)``):
``save_checkpoint`` returns once the checkpoint is copied, and a failed
write is raised by the next save or by ``teardown()``. Lightning's own
``AsyncCheckpointIO`` wrapper works too: it clones the tensors and calls
this plugin's blocking save on its thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import lazystore as ls
from lazystore._core.distribution import install_hint
from lazystore.errors import MissingDependencyError

try:
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.fabric.utilities.cloud_io import get_filesystem
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(
        f"lazystore.lightning needs PyTorch Lightning: {install_hint('lightning', 'lightning')}") from exc


class LazyStoreCheckpointIO(CheckpointIO):
    """A Lightning ``CheckpointIO`` that writes lazystore files.

    ``compression`` (e.g. "zstd") is passed to :func:`lazystore.save`;
    ``blocking=False`` saves in the background, one save at a time.
    ``storage_options`` given to ``save_checkpoint`` (by
    ``Trainer.save_checkpoint(..., storage_options=...)``) are the fsspec
    options of an object-store URL, as for :func:`lazystore.save`.
    """

    def __init__(self, *, compression=None, blocking: bool = True):
        super().__init__()
        self.compression = compression
        self.blocking = blocking
        self._pending: tuple[str, object] | None = None  # (path, future) of the save in flight

    def save_checkpoint(self, checkpoint: dict, path, storage_options: Mapping | None = None) -> None:
        path = os.fspath(path)
        if "://" not in path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # The previous background save's failure, if nobody has seen it, is raised here (the next save).
        self._pending = None
        future = ls.save(checkpoint, path, compression=self.compression, storage_options=storage_options,
                         blocking=self.blocking)
        if future is not None:
            self._pending = (path, future)

    def load_checkpoint(self, path, map_location=None, weights_only: bool | None = None) -> dict:
        """Load a checkpoint. ``map_location``: None, a device string or a
        ``torch.device``; a function or a dict (torch.load's other forms)
        loads onto the CPU, and Lightning moves the state where it belongs.
        ``weights_only`` is accepted and needs no effect: nothing is unpickled."""
        self.wait()
        if callable(map_location) or isinstance(map_location, Mapping):
            map_location = None
        return ls.load(os.fspath(path), map_location=map_location)

    def remove_checkpoint(self, path) -> None:
        path = os.fspath(path)
        if self._pending is not None and self._pending[0] == path:
            self.wait()  # else the save in flight would bring the file back
        fs = get_filesystem(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].result()

    def teardown(self) -> None:
        self.wait()
