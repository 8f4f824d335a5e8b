"""ShardedView: one checkpoint over the views of several shard files.

Opening a folder (which index it has, which shard holds which tensor, that
the shards belong to one save) is :mod:`lazystore.interop.sharded`'s job;
this view only routes each call to the shard holding the tensor.
"""

from __future__ import annotations

import numpy as np

from lazystore._core.globs import Names
from lazystore.views.base import TensorInfo, TensorSlice, ViewBase

__all__ = ["ShardedView"]


class ShardedView(ViewBase):
    """A Mapping over the tensors of several shard views, as one checkpoint.

    It owns the shard views it is given: closing it closes them, and it is
    closed once any of them is. The contract is :class:`ViewBase`'s:
    ``load`` reads each tensor through its shard's own ``load``, and
    ``verify`` runs each shard's own checks (every shard whole, its head
    included, when asked for all tensors). ``ls.open(folder)`` builds one
    (:mod:`lazystore.interop.sharded`).

    Parameters
    ----------
    name : str
        Where the checkpoint is read from (the folder).
    views : list of ViewBase
        The shards' views, in index order; the new view owns them.
    owner : dict of str to ViewBase
        Each tensor name, in the checkpoint's order, to the shard view
        holding it.
    metadata : dict
        The checkpoint's user metadata.
    system_metadata : dict
        lazystore's own metadata entries.
    format : str
        The format the view reports (``"lazystore (sharded)"``, say).
    """

    def __init__(self, name: str, views: list[ViewBase], owner: dict[str, ViewBase], *, metadata: dict,
                 system_metadata: dict, format: str) -> None:
        self.name = name
        self._shards = views
        self._table = owner
        self._metadata = metadata
        self._system_metadata = system_metadata
        self.format = format
        self.format_version = views[0].format_version if views else ()

    def _selection(self, table: dict) -> ShardedView:
        return ShardedView(self.name, self._shards, table, metadata=self._metadata,
                           system_metadata=self._system_metadata, format=self.format)

    def _release(self) -> None:
        for v in self._shards:
            v.close()

    @property
    def closed(self) -> bool:
        """Whether the view, the view it was selected from, or any shard is closed."""
        return super().closed or any(v.closed for v in self._shards)

    @property
    def shards(self) -> list[ViewBase]:
        """The views of the shards, in index order."""
        return list(self._shards)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._lookup(name)[name]

    def info(self, name: str) -> TensorInfo:
        return self._lookup(name).info(name)

    def get_slice(self, name: str) -> TensorSlice:
        part = self._lookup(name).get_slice(name)
        # This view's own handle, so that closing this view (a selection
        # too) closes it: it reads through the shard's.
        return TensorSlice(self, name, part.dtype, part.shape, lambda index, _picks: part[index])

    def _by_shard(self, names: list[str]) -> list[tuple[ViewBase, list[str]]]:
        groups: dict[int, tuple[ViewBase, list[str]]] = {}
        for n in names:
            v = self._table[n]
            groups.setdefault(id(v), (v, []))[1].append(n)
        return list(groups.values())

    def verify(self, keys: Names | None = None) -> list[str]:
        names = self._wanted(keys)
        bad: set[str] = set()
        if keys is None and self._parent is None:  # every shard whole, its head included
            for v in self._shards:
                bad.update(v.verify())
        else:
            for v, group in self._by_shard(names):
                bad.update(v.verify(group))
        return [n for n in names if n in bad]

    def load(self, keys: Names | None = None, *, verify: bool = True) -> dict[str, np.ndarray]:
        names = self._wanted(keys)
        loaded: dict = {}
        for v, group in self._by_shard(names):
            loaded.update(v.load(group, verify=verify))
        return {n: loaded[n] for n in names}

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._shards)} shards, {len(self._table)} tensors"
        return f"<ShardedView {self.name!r}: {state}>"
