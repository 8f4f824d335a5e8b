"""What a DCP checkpoint saved, whichever writer wrote it: each tensor as the
chunks ranks saved of it, and the non-tensor ("bytes") items.

Both of the folders consolidation reads (lazystore's own, described by
``metadata.lzy``; torch's ``FileSystemWriter``'s, described by the pickled
``.metadata``) are turned into these few values, so assembling full tensors
(:mod:`lazystore.dcp.consolidate`) is written once. A chunk knows how to read
a run of its rows; how depends on the folder (:mod:`lazystore.dcp.folders`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from lazystore._core.dtypes import BY_TORCH_NAME, DtypeSpec
from lazystore._native.entry_rules import size_problem
from lazystore.errors import FormatError


class RowReader(Protocol):
    """Reads a saved chunk (its own shape is ``sizes``) a run of rows at a time.
    Consolidation reads each chunk's rows once, in order, front to back."""

    def rows(self, start: int, stop: int) -> np.ndarray: ...


@dataclass(frozen=True)
class SavedChunk:
    """One saved piece of a tensor: the box ``offsets`` + ``sizes`` of the full tensor."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str  # the file holding it, which every error reading it names
    reader: RowReader


@dataclass(frozen=True)
class SavedTensor:
    fqn: str
    spec: DtypeSpec
    shape: tuple[int, ...]
    chunks: tuple[SavedChunk, ...]


@dataclass(frozen=True)
class SavedBytes:
    """A non-tensor item: bytes DCP wrote with ``torch.save``, read by ``load()``."""

    fqn: str
    nbytes: int
    load: Callable[[], bytes]  # checked where the folder's format can check them


def tensor_spec(dtype_name: str, fqn: str, where) -> DtypeSpec:
    spec = BY_TORCH_NAME.get(dtype_name)
    if spec is None:
        raise FormatError(f"{where}: tensor {fqn!r} has dtype {dtype_name!r}, which lazystore cannot store")
    return spec


def check_shape(shape: tuple[int, ...], spec: DtypeSpec, fqn: str, where) -> None:
    """A tensor size from a file, bounded as a lazystore file's are, before
    anything of that size is allocated."""
    problem = size_problem(shape, spec.dtype.itemsize)
    if problem is not None:
        raise FormatError(f"{where}: tensor {fqn!r} of size {list(shape)}: {problem}")


def check_tiling(tensor: SavedTensor, where) -> None:
    """The chunks cover the tensor exactly once: each inside it, none
    overlapping another, and their volumes adding up to the tensor's. A
    checkpoint whose chunks leave a gap would give uninitialised memory;
    overlapping ones, two answers for one element."""
    shape = tensor.shape
    total = 0
    for c in tensor.chunks:
        if len(c.offsets) != len(shape) or len(c.sizes) != len(shape) or any(
                o < 0 or s < 0 or o + s > n for o, s, n in zip(c.offsets, c.sizes, shape)):
            raise FormatError(f"{where}: a chunk of {tensor.fqn!r} at {list(c.offsets)} size {list(c.sizes)} "
                              f"lies outside the tensor's size {list(shape)}")
        total += math.prod(c.sizes)
    if total != math.prod(shape):
        raise FormatError(f"{where}: the chunks of {tensor.fqn!r} hold {total} elements, the tensor "
                          f"{math.prod(shape)}: the checkpoint is missing part of it or repeats one")
    boxes = sorted((c.offsets, c.sizes) for c in tensor.chunks if math.prod(c.sizes))
    for i, (oa, sa) in enumerate(boxes):
        for ob, sb in boxes[i + 1:]:
            if shape and ob[0] >= oa[0] + sa[0]:
                break  # sorted by first offset: no later box reaches back into this one
            if all(b < a + n and a < b + m for a, n, b, m in zip(oa, sa, ob, sb)):
                raise FormatError(f"{where}: two chunks of {tensor.fqn!r} overlap (at {list(oa)} and {list(ob)})")
