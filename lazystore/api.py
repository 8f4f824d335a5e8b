"""The top-level functions: open, load, save."""

from __future__ import annotations


import numpy as np

from .view import CheckpointView
from .writer import save  # noqa: F401  (re-exported)


def open(path, *, verify: bool = False) -> CheckpointView:  # noqa: A001 - mirrors builtins.open
    """Open a checkpoint lazily: only the index is read.

    With ``verify=True`` each raw tensor is checked against its checksums on
    first access (compressed chunks are always checked when decoded).
    """
    return CheckpointView.open(path, verify=verify)


def load(path, keys=None, *, verify: bool = False) -> dict[str, np.ndarray]:
    """Writable arrays of some or all tensors (a list of names, or a glob).

    Raw tensors of a local file are private copy-on-write views of it (see
    :meth:`CheckpointView.load`); compressed ones are decoded."""
    with open(path, verify=verify) as ck:
        return ck.load(keys)


__all__ = ["open", "load", "save"]
