"""The top-level functions: open, load, save."""

from __future__ import annotations

from collections.abc import Mapping

from . import tree
from .adapters import torch as torch_adapter
from .view import CheckpointView
from .writer import Writer


def open(path, *, verify: bool = False) -> CheckpointView:  # noqa: A001 - mirrors builtins.open
    """Open a checkpoint lazily: only the index is read.

    The view maps tensor names to numpy arrays. For nested state saved with
    :func:`save` the names are the tensor leaves' paths joined with "/"
    (e.g. ``optimizer/state/0/exp_avg``).

    With ``verify=True`` each raw tensor is checked against its checksums on
    first access (compressed chunks are always checked when decoded).
    """
    return CheckpointView.open(path, verify=verify)


def save(obj, path, *, compression=None, compression_level: int | None = None,
         metadata: Mapping | None = None, **writer_options) -> None:
    """Write a checkpoint atomically: a flat mapping of names to arrays, or any
    nested training state.

    ``obj`` may nest dicts (str or int keys), OrderedDicts, lists and tuples,
    with tensor leaves (numpy arrays and scalars, torch tensors of any device,
    moved to the CPU) and scalar leaves (int, float, bool, None, str). Tensor
    leaves become tensors named by their path joined with "/"; the rest of
    the structure is recorded in the file so :func:`load` rebuilds it. A flat
    mapping of str names to numpy arrays is written as is, with no structure.
    Nothing is pickled.

    ``writer_options`` are :class:`Writer`'s (``alignment``, ``chunk_bytes``).
    """
    _save(obj, path, compression=compression, compression_level=compression_level,
          metadata=metadata, **writer_options)


def _save(obj, path, *, system_metadata: Mapping | None = None, **writer_options) -> None:
    """:func:`save`, plus reserved metadata entries for lazystore's own layers."""
    if tree.is_flat(obj):
        structure, leaves = None, obj
    else:
        structure, leaves = tree.flatten(obj)  # checks everything before a byte is written
    with Writer(path, **writer_options) as w:
        if structure is not None:
            w.system_metadata[tree.TREE_KEY] = structure
        w.system_metadata.update(system_metadata or {})
        for key, leaf in leaves.items():
            # One leaf at a time: a GPU tensor's CPU copy lives only while it is written.
            w.add(key, leaf if structure is None else tree.as_array(leaf))


def load(path, keys=None, *, map_location=None, verify: bool = False):
    """Read a checkpoint back, as it was saved.

    A flat checkpoint (no nested structure) gives a dict of names to arrays.
    Nested state comes back with the same structure and types: tuples stay
    tuples, int keys ints, torch tensors torch tensors (on ``map_location``:
    "cpu", "cuda:0" or a torch.device; None means the CPU), numpy arrays
    numpy arrays.

    Arrays and tensors are writable. Raw tensors of a local file are private
    copy-on-write views of it (see :meth:`CheckpointView.load`): nothing is
    copied up front, and writing to them never changes the file. Torch
    tensors share that memory (``torch.from_numpy``); compressed tensors are
    decoded.

    ``keys`` selects tensors by name (their joined paths): a glob pattern
    (str) or an iterable of exact names. For nested state the result is the
    sub-tree holding just those tensors and the containers on their paths;
    scalars are left out, and lists and tuples keep the selected elements in
    order.
    """
    with open(path, verify=verify) as ck:
        structure = ck.system_metadata.get(tree.TREE_KEY)
        if structure is None:
            return ck.load(keys)
        root, names = tree.parse(structure, ck.keys())
        if keys is None:
            selected = None
            arrays = ck.load()
        else:
            arrays = ck.select(keys).load()
            selected = set(arrays)
    dev = None
    if tree.has_torch(root, selected):
        dev = torch_adapter.device(map_location)

    def make_torch(arr, node):
        return torch_adapter.from_numpy(arr, node, dev)

    return tree.build(root, arrays, make_torch, selected)


__all__ = ["open", "load", "save"]
