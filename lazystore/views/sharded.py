"""ShardedView: one checkpoint over the views of several shard files.

Opening a folder (which index it has, which shard holds which tensor, that
the shards belong to one save) is :mod:`lazystore.interop.sharded`'s job;
this view only routes each call to the shard holding the tensor.
"""

from __future__ import annotations

from collections.abc import Iterator

from lazystore.errors import ClosedError, TensorNotFoundError
from lazystore.views.base import ViewBase


class ShardedView(ViewBase):
    """A Mapping over the tensors of several shard views, as one checkpoint."""

    def __init__(self, name: str, views: list, owner: dict[str, object], *, metadata: dict,
                 system_metadata: dict, format: str):  # noqa: A002
        self.name = name
        self._views = views
        self._owner = owner  # tensor name -> the shard view holding it
        self._metadata = metadata
        self._system_metadata = system_metadata
        self.format = format
        self.format_version = views[0].format_version if views else ()
        self._owns = True
        self._closed = False

    def _view(self, name: str):
        self._check_open()
        try:
            return self._owner[name]
        except (KeyError, TypeError):
            raise TensorNotFoundError(f"no tensor named {name!r} in {self.name}") from None

    def _check_open(self) -> None:
        if self._closed or any(getattr(v, "_closed", False) for v in self._views):
            raise ClosedError(f"checkpoint {self.name!r} is closed")

    def __getitem__(self, name: str):
        return self._view(name)[name]

    def __iter__(self) -> Iterator[str]:
        self._check_open()
        return iter(self._owner)

    def __len__(self) -> int:
        self._check_open()
        return len(self._owner)

    def __contains__(self, name) -> bool:
        self._check_open()
        return name in self._owner

    @property
    def metadata(self) -> dict:
        self._check_open()
        return self._metadata

    @property
    def system_metadata(self) -> dict:
        self._check_open()
        return self._system_metadata

    @property
    def shards(self) -> list:
        """The views of the shards, in index order."""
        return list(self._views)

    def info(self, name: str):
        return self._view(name).info(name)

    def get_slice(self, name: str):
        return self._view(name).get_slice(name)

    def select(self, keys_or_glob) -> "ShardedView":
        self._check_open()
        names = self._resolve(keys_or_glob)
        sub = ShardedView(self.name, self._views, {n: self._owner[n] for n in names}, metadata=self._metadata,
                          system_metadata=self._system_metadata, format=self.format)
        sub._owns = False
        return sub

    def _by_shard(self, names: list[str]) -> list[tuple[object, list[str]]]:
        groups: dict[int, tuple[object, list[str]]] = {}
        for n in names:
            v = self._owner[n]
            groups.setdefault(id(v), (v, []))[1].append(n)
        return list(groups.values())

    def verify(self, keys=None) -> list[str]:
        """Names of corrupt tensors, over every shard (each shard's own checks)."""
        self._check_open()
        names = list(self._owner) if keys is None else self._resolve(keys)
        bad: set[str] = set()
        if keys is None:
            for v in self._views:
                bad.update(v.verify())
        else:
            for v, group in self._by_shard(names):
                bad.update(v.verify(group))
        return [n for n in names if n in bad]

    def load(self, keys=None, *, verify: bool = False) -> dict:
        self._check_open()
        names = list(self._owner) if keys is None else self._resolve(keys)
        loaded: dict = {}
        for v, group in self._by_shard(names):
            loaded.update(v.load(group, verify=verify))
        return {n: loaded[n] for n in names}

    def close(self) -> None:
        if self._owns and not self._closed:
            for v in self._views:
                v.close()
        self._closed = True

    def __repr__(self) -> str:
        return f"<ShardedView {self.name!r}: {len(self._views)} shards, {len(self._owner)} tensors>"
