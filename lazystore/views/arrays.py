"""ArraysView: a checkpoint-like view over tensors already at hand.

Archives that are not lazy checkpoints (torch zips, ``.npz``) are read
through it, so converting, listing and diffing them works as for any
checkpoint; :mod:`lazystore.interop.archives` builds it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from lazystore._native.index import TensorInfo
from lazystore.errors import TensorNotFoundError, VerificationUnavailableError
from lazystore.views.base import ViewBase


class ArraysView(ViewBase):
    """A checkpoint-like Mapping over tensors already at hand (torch tensors
    of a memory-mapped zip, or members of an npz read one at a time)."""

    def __init__(self, name: str, infos: dict[str, TensorInfo], get, *, fmt: str, system_metadata=None):
        self.name = name
        self._infos = infos
        self._get = get
        self.format = fmt
        self.metadata: dict = {}
        self.system_metadata: dict = dict(system_metadata or {})
        self._closers: list = []

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._infos:
            raise TensorNotFoundError(f"no tensor named {name!r} in {self.name}")
        return self._get(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, name: str) -> TensorInfo:
        if name not in self._infos:
            raise TensorNotFoundError(f"no tensor named {name!r} in {self.name}")
        return self._infos[name]

    def get_slice(self, name: str) -> np.ndarray:
        return self[name]  # an array: indexing it is the slice

    def select(self, keys_or_glob) -> "ArraysView":
        names = self._resolve(keys_or_glob)
        sub = ArraysView(self.name, {n: self._infos[n] for n in names}, self._get, fmt=self.format,
                         system_metadata=self.system_metadata)
        sub.metadata = self.metadata
        return sub

    def verify(self, keys=None) -> list[str]:
        raise VerificationUnavailableError(f"cannot verify {self.name}: a {self.format} file records no checksums")

    def load(self, keys=None, *, verify: bool = False) -> dict[str, np.ndarray]:
        names = list(self) if keys is None else self._resolve(keys)
        return {n: np.array(self[n]) for n in names}

    def close(self) -> None:
        for close in self._closers:
            close()
        self._closers = []

    def __repr__(self) -> str:
        return f"<ArraysView {self.format} {self.name!r}: {len(self)} tensors>"
