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

from collections.abc import Collection, Mapping
from itertools import chain

from lazystore._core import ties
from lazystore.errors import StateDictMismatchError
from lazystore.interop import targets
from lazystore.torch import files


def save_model(model, filename, metadata: Mapping | None = None, force_contiguous: bool = True,
               **options) -> None:
    """Save ``model.state_dict()`` to ``filename``; tied tensors once.

    As safetensors does, each name stored as another's alias is also noted in
    the metadata (``{"b.weight": "a.weight"}``) unless the metadata already
    has that key. ``force_contiguous`` is accepted for compatibility: every
    tensor is saved as its values, contiguous or not. ``options`` are
    :func:`~lazystore.torch.save_file`'s.
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


def load_model(model, filename, strict: bool = True, device="cpu", *, backend: str = "mmap", verify: bool = True,
               encryption_key=None) -> tuple[set[str], list[str]]:
    """Load ``filename`` into ``model``; ``(missing, unexpected)`` names.

    ``missing`` is the set of the model's names the file did not provide,
    ``unexpected`` the list of the file's names the model did not use (a set
    and a list, as safetensors returns them). With ``strict``, either raises
    :class:`StateDictMismatchError` naming them. ``device`` is where the
    tensors are read to (see :func:`~lazystore.torch.load_file`); a model
    whose parameters are on the meta device gets those tensors assigned.
    The file's tensors are checked before any reaches the model (a damaged
    one raises ``ls.ChecksumError`` and leaves the model as it was), unless
    ``verify=False``. ``encryption_key`` reads an encrypted file, as
    ``ls.open`` does.
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
