"""ArraysView: a checkpoint-like view over tensors already at hand.

Archives that are not lazy checkpoints (torch zips, ``.npz``) are read
through it, so converting, listing and diffing them works as for any
checkpoint; :mod:`lazystore.interop.archives` builds it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from lazystore._core.globs import Names
from lazystore.errors import VerificationUnavailableError
from lazystore.views.base import TensorInfo, TensorSlice, ViewBase

# read_part(name, index, picks): the part of a tensor an index selects (as
# TensorSlice's read, with the tensor's name first).
ReadPart = Callable[[str, Any, list[range]], np.ndarray]

__all__ = ["ArraysView"]


class ArraysView(ViewBase):
    """A checkpoint-like Mapping over tensors already at hand.

    They are torch tensors of a memory-mapped zip, or members of an npz read
    one at a time. The contract is :class:`ViewBase`'s: such archives
    record no checksums, so :meth:`verify` raises
    VerificationUnavailableError and ``load`` gives writable copies with
    nothing to verify. From ``get_slice``, a torch tensor's part is a view
    of the mapped zip; an npz member is read from its start up to the part
    (zip members cannot be read from the middle), continuing where the last
    part read stopped.

    Parameters
    ----------
    name : str
        Where the tensors are read from.
    infos : dict of str to TensorInfo
        Each tensor's info, in the archive's order.
    get : callable
        ``get(name)``: a tensor's array.
    fmt : str
        The format the view reports.
    system_metadata : mapping of str to Any, optional
        lazystore's own metadata entries the archive carries.
    release : callable, optional
        ``release()``: frees what ``get`` reads from, once, when the view is
        closed.
    read_part : callable, optional
        ``read_part(name, index, picks)``: ``get(name)[index]`` without
        reading the whole tensor (``picks``: the elements ``index`` selects
        on each axis); by default the whole tensor is read and indexed.
    """

    def __init__(self, name: str, infos: dict[str, TensorInfo], get: Callable[[str], np.ndarray], *, fmt: str,
                 system_metadata: Mapping[str, Any] | None = None, release: Callable[[], None] | None = None,
                 read_part: ReadPart | None = None) -> None:
        self.name = name
        self._table = infos
        self._get = get
        self._read_part = read_part or self._part_of_whole
        self._on_release = release
        self.format = fmt
        self._metadata: dict = {}
        self._system_metadata: dict = dict(system_metadata or {})

    def _selection(self, table: dict) -> ArraysView:
        return ArraysView(self.name, table, self._get, fmt=self.format, system_metadata=self._system_metadata,
                          read_part=self._read_part)

    def _release(self) -> None:
        if self._on_release is not None:
            self._on_release()

    def __getitem__(self, name: str) -> np.ndarray:
        self._lookup(name)
        return self._get(name)

    def info(self, name: str) -> TensorInfo:
        return self._lookup(name)

    def get_slice(self, name: str) -> TensorSlice:
        info = self._lookup(name)
        return TensorSlice(self, name, info.dtype, info.shape, partial(self._read_part, name))

    def _part_of_whole(self, name: str, index: Any, _picks: list[range]) -> np.ndarray:
        return self._get(name)[index]

    def verify(self, keys: Names | None = None) -> list[str]:
        self._check_open()
        raise VerificationUnavailableError(f"cannot verify {self.name}: a {self.format} file records no checksums")

    def load(self, keys: Names | None = None, *, verify: bool = True) -> dict[str, np.ndarray]:
        return {n: np.array(self._get(n)) for n in self._wanted(keys)}

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self._table)} tensors"
        return f"<ArraysView {self.format} {self.name!r}: {state}>"
