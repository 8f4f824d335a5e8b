"""LazyStoreCheckpointIO: Lightning's checkpoint I/O in lazystore files."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any, BinaryIO

import lazystore as ls
from lazystore.lightning import objects, torch_files
from lazystore.lightning.imports import CheckpointIO, get_filesystem


class LazyStoreCheckpointIO(CheckpointIO):
    """A Lightning ``CheckpointIO`` that writes lazystore files.

    ``storage_options`` given to ``save_checkpoint`` (by
    ``Trainer.save_checkpoint(..., storage_options=...)``) are the fsspec
    options of an object-store URL, as for :func:`lazystore.save`.

    Parameters
    ----------
    compression : {None, "auto", "zstd", "huffman"}, optional
        Passed to :func:`lazystore.save`.
    blocking : bool, optional
        True (the default) saves before ``save_checkpoint`` returns; False
        saves in the background, one save at a time.
    """

    def __init__(self, *, compression: str | None = None, blocking: bool = True) -> None:
        super().__init__()
        self.compression = compression
        self.blocking = blocking
        self._pending: tuple[str, Future] | None = None  # (path, future) of the save in flight

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike[str],
                        storage_options: Mapping[str, Any] | None = None) -> None:
        """Save Lightning's checkpoint dict as a lazystore file at ``path``.

        With ``blocking=False`` the save runs in the background; the error
        of a background save nobody has waited for is raised by the next
        ``save_checkpoint`` (or by :meth:`wait`).

        Parameters
        ----------
        checkpoint : dict of str to Any
            Lightning's checkpoint: weights, optimizer and scheduler states,
            loop progress, callback states, hyper-parameters.
        path : str or os.PathLike
            A local path (its folder is created) or an object-store URL.
        storage_options : Mapping of str to Any, optional
            The fsspec options of a URL, as for :func:`lazystore.save`.

        Raises
        ------
        InvalidInputError
            An entry lazystore cannot save (the message names it).
        """
        path = os.fspath(path)
        if "://" not in path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        # The previous background save's failure, if nobody has seen it, is raised here (the next save).
        self._pending = None
        state = objects.encode(checkpoint)
        if self.blocking:
            ls.save(state, path, compression=self.compression, storage_options=storage_options)
        else:
            self._pending = (path, ls.save_async(state, path, compression=self.compression,
                                                 storage_options=storage_options))

    def load_checkpoint(self, path: str | os.PathLike[str] | BinaryIO, map_location: Any = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        """Load a checkpoint: a lazystore file, or a torch file Lightning wrote.

        The kind is told by content; either is read without unpickling,
        whatever ``weights_only`` says. A background save in flight is
        waited for first.

        Parameters
        ----------
        path : str or os.PathLike or file object
            The checkpoint (a file object is read as ``ls.load`` reads one).
        map_location : str or torch.device or callable or dict, optional
            For a lazystore file None, a device string or a ``torch.device``
            (a function or a dict, torch.load's other forms, loads onto the
            CPU, and Lightning moves the state where it belongs); for a
            torch file, any of torch.load's forms (None: the CPU).
        weights_only : bool, optional
            Accepted; nothing is ever unpickled.

        Returns
        -------
        dict of str to Any
            Lightning's checkpoint dict, with its paths and
            ``argparse.Namespace`` objects rebuilt.

        Raises
        ------
        FormatError
            The file is damaged, or a torch file holds what torch's
            weights-only unpickler refuses.
        ChecksumError
            A tensor fails its checksums.
        """
        self.wait()
        if not hasattr(path, "read"):  # a file object is read as ls.load reads one
            path = os.fspath(path)
            if torch_files.is_torch_file(path):
                return torch_files.load(path, map_location)
        if callable(map_location) or isinstance(map_location, Mapping):
            map_location = None
        return objects.decode(ls.load(path, map_location=map_location), _name(path))

    def check(self, state: Mapping[str, Any]) -> None:
        """Raise what :meth:`save_checkpoint` would raise for ``state``, writing nothing.

        ``state`` is saved to memory. For the parts of a checkpoint known
        before training (hyper-parameters, see
        :mod:`lazystore.lightning.setup_check`).

        Parameters
        ----------
        state : Mapping of str to Any
            A part of a checkpoint dict.

        Raises
        ------
        InvalidInputError
            An entry lazystore cannot save (the message names it).
        """
        ls.save(objects.encode(dict(state)), io.BytesIO())

    def remove_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Remove the checkpoint at ``path``, once a save of it in flight is done.

        Parameters
        ----------
        path : str or os.PathLike
            A local path or an object-store URL; nothing there is no error.
        """
        path = os.fspath(path)
        if self._pending is not None and self._pending[0] == path:
            self.wait()  # else the save in flight would bring the file back
        fs = get_filesystem(path)
        if fs.exists(path):
            fs.rm(path, recursive=True)

    def wait(self) -> None:
        """Wait for the background save in flight; raise its error.

        Raises
        ------
        Exception
            Whatever the background save raised, re-raised here.
        """
        pending, self._pending = self._pending, None
        if pending is not None:
            pending[1].result()

    def teardown(self) -> None:
        """Wait for the background save in flight, as Lightning's teardown asks."""
        self.wait()


def _name(path: object) -> str:
    """How errors name what was read: a path, or a file object's name."""
    return str(getattr(path, "name", "the file object")) if hasattr(path, "read") else str(path)
