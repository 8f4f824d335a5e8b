"""``safetensors.torch.save_model`` and ``load_model`` over lazystore files.

A model's tied parameters (a module registered twice, tied embeddings) are
stored once. Loading follows safetensors' rules for names the model ties: a
file needs only one name of each tied group, and holding different tensors
under two of them makes the later ones *unexpected* (which one would the
parameter take?). Loading into a module built on the meta device (as
``accelerate.init_empty_weights`` builds them) assigns the loaded tensors
instead of copying into memory that does not exist, then ties the tied
parameters again: the model's memory is then only its weights, mapped from
the file on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from itertools import chain
from typing import IO, TYPE_CHECKING, Any

from lazystore._core import ties
from lazystore.errors import StateDictMismatchError
from lazystore.interop import targets
from lazystore.torch import files

if TYPE_CHECKING:
    import torch


def save_model(model: torch.nn.Module, filename: str | os.PathLike[str] | IO[bytes],
               metadata: Mapping[str, Any] | None = None, force_contiguous: bool = True, **options: Any) -> None:
    """Save ``model.state_dict()`` to ``filename``; tied tensors once.

    As safetensors does, each name stored as another's alias is also noted in
    the metadata (``{"b.weight": "a.weight"}``) unless the metadata already
    has that key.

    Parameters
    ----------
    model : torch.nn.Module
        The model whose state dict is saved.
    filename : str, os.PathLike or binary file object
        Where to write, as :func:`~lazystore.torch.save_file` takes it.
    metadata : Mapping, optional
        Any JSON object.
    force_contiguous : bool, optional
        Accepted for compatibility: every tensor is saved as its values,
        contiguous or not.
    **options
        :func:`~lazystore.torch.save_file`'s writer options.

    Raises
    ------
    InvalidInputError
        A tensor cannot be stored, an option is unknown, or ``filename`` is
        a folder.
    """
    del force_contiguous  # nothing to force: non-contiguous tensors are saved as they are
    state = model.state_dict()
    aliases = files.checked(state)
    metadata = dict(metadata or {})
    for alias, kept in aliases.items():
        metadata.setdefault(alias, kept)  # informative only: loading reads lazystore's own record
    if targets.format_of(filename) == "safetensors":
        # As safetensors' save_model writes it: the aliases only noted (load_model ties them again).
        state = {name: t for name, t in state.items() if name not in aliases}
    files.write(state, filename, metadata, options)


def load_model(model: torch.nn.Module, filename: str | os.PathLike[str], strict: bool = True,
               device: str | int | torch.device = "cpu", *, backend: str = "mmap", verify: bool = True,
               encryption_key: Any = None) -> tuple[set[str], list[str]]:
    """Load ``filename`` into ``model``.

    A model whose parameters are on the meta device gets the loaded tensors
    assigned. The file's tensors are checked before any reaches the model
    (a damaged one leaves the model as it was), unless ``verify=False``.

    Parameters
    ----------
    model : torch.nn.Module
        The model to load into.
    filename : str or os.PathLike
        A local path or an fsspec URL: anything ``ls.open`` opens.
    strict : bool, optional
        Raise if a name is missing or unexpected.
    device : str, int or torch.device, optional
        Where the tensors are read to (see :func:`~lazystore.torch.load_file`).
    backend : str, optional
        safetensors' I/O strategy: accepted, and lazystore chooses its own.
    verify : bool, optional
        Check the tensors against their checksums first.
    encryption_key : optional
        The key of an encrypted file, as ``ls.open`` takes it.

    Returns
    -------
    missing : set of str
        The model's names the file did not provide.
    unexpected : list of str
        The file's names the model did not use (a set and a list, as
        safetensors returns them).

    Raises
    ------
    StateDictMismatchError
        With ``strict``, names missing or unexpected (the message names them).
    ChecksumError
        A tensor is damaged.
    """
    state = files.load_file(filename, device=device, backend=backend, verify=verify, encryption_key=encryption_key)
    groups = ties.model_ties(model)
    unexpected_twins = _one_per_group(state, groups)
    assign = any(t.is_meta for t in chain(model.parameters(), model.buffers()))
    result = model.load_state_dict(state, strict=False, assign=assign)
    if assign:
        ties.retie(model, groups)
    # A tied name is not missing when another name of its group was loaded.
    covered = {n for g in groups if any(m in state for m in g) for n in g}
    missing = {n for n in result.missing_keys if n not in covered}
    unexpected = [*result.unexpected_keys, *unexpected_twins]
    if strict and (missing or unexpected):
        raise StateDictMismatchError(_mismatch(model, missing, unexpected))
    return missing, unexpected


def _one_per_group(state: dict, groups: list[list[str]]) -> list[str]:
    """Keep one name of each tied group in ``state`` (the first present), so
    the tied parameter is loaded once; the names dropped that held a tensor
    of their own are unexpected."""
    twins = []
    for group in groups:
        present = [n for n in group if n in state]
        for name in present[1:]:
            if state[name] is not state[present[0]]:
                twins.append(name)
            del state[name]
    return twins


def _mismatch(model, missing: Collection[str], unexpected: Collection[str]) -> str:
    """torch's wording, which safetensors' error uses too."""
    lines = [f"Error(s) in loading state_dict for {type(model).__name__}:"]
    if missing:
        lines.append("    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing)))
    if unexpected:
        lines.append("    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected)))
    return "\n".join(lines)
