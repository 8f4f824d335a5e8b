"""What every lazy view of a checkpoint shares, whatever it reads from.

:class:`~lazystore.views.checkpoint.CheckpointView` (one file), :class:`~lazystore.views.sharded.ShardedView`
(a folder of shards) and :class:`~lazystore.views.arrays.ArraysView`
(tensors of a torch or npz archive, for conversion) are all Mappings of
names to arrays with ``info``, ``get_slice``, ``select``, ``verify``,
``load``, ``metadata``, ``system_metadata`` and ``close``. Code that takes
"a checkpoint" (``ls.save`` of a view, the command line) accepts any of
them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping

from lazystore.errors import InvalidInputError, TensorNotFoundError


class ViewBase(Mapping):
    format: str = "lazystore"
    format_version: tuple = ()

    def _resolve(self, keys_or_glob) -> list[str]:
        """Names from a glob pattern (str) or an iterable of names (each must exist)."""
        if isinstance(keys_or_glob, str):
            return [n for n in self if fnmatch.fnmatchcase(n, keys_or_glob)]
        if not isinstance(keys_or_glob, Iterable):
            raise InvalidInputError(f"expected a glob pattern or an iterable of names, got {keys_or_glob!r}")
        names = list(keys_or_glob)
        for n in names:
            if n not in self:
                raise TensorNotFoundError(f"no tensor named {n!r} in {self!r}")
        return names

    @property
    def nbytes(self) -> int:
        """Decoded size of the tensors in this view."""
        return sum(self.info(n).nbytes for n in self)

    @property
    def stored_nbytes(self) -> int:
        """Bytes the tensors of this view occupy in storage."""
        return sum(self.info(n).stored_nbytes for n in self)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
