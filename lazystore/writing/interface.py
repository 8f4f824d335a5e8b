"""What every checkpoint writer offers, whatever it writes: a lazystore
file (:class:`~lazystore.Writer`), a safetensors file or a folder of
shards (``lazystore.interop``). ``ls.save`` and the converters fill any of
them the same way: tensors one by one (whole, or in pieces as they
stream), then ``close`` (publish) or ``abort`` (discard); a ``with`` block
closes on success and aborts on an error."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import IO

from lazystore.sinks.base import CloseOrAbort


class TensorWriter(CloseOrAbort, ABC):
    """The writer interface (see the module docstring). ``metadata`` is the
    user's string metadata; ``system_metadata`` lazystore's own entries,
    set by lazystore's layers before ``close``."""

    # Where it writes: a local file's or folder's Path, a URL, or the file object given.
    path: str | os.PathLike[str] | IO[bytes]
    metadata: dict
    system_metadata: dict

    @abstractmethod
    def add(self, name: str, array, *, compression=None) -> None:
        """Append one tensor (a numpy array or anything ``np.asarray`` takes)."""

    @abstractmethod
    def add_pieces(self, name: str, pieces, *, dtype, shape, compression=None) -> None:
        """Append one tensor given as its C-order bytes in pieces (any
        buffers, in order), without holding it whole."""

    @abstractmethod
    def close(self) -> None:
        """Publish the checkpoint, whole, at the target."""

    @abstractmethod
    def abort(self) -> None:
        """Discard everything written; the target keeps what it had."""
