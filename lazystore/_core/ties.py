"""Tensors that are one tensor under several names: found on save, stored
once, and tied again on load.

Two names are *aliases* when their tensors are the same view of the same
memory: same storage, offset, shape, strides and dtype. That is a module
registered twice (``self.b = self.a``) or tied weights (``lm_head.weight =
embed.weight``), whose ``state_dict()`` entries are distinct detached tensors
over one parameter. A file stores the first name's data and records the
others under the reserved metadata member ``__lazystore_aliases__``
(docs/torch.md): ``{"version": 1, "aliases": {alias: stored name}}``.
Tensors that merely overlap (``A`` and ``A[:1]``) are not aliases: each is
stored whole, as its own values.

A model's ties are found by identity instead (``named_parameters`` with
duplicates), which also works on the meta device, where tensors have no
memory to compare.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lazystore._core import globs
from lazystore._core.reserved_keys import RESERVED_METADATA_PREFIX
from lazystore.errors import FormatError, InvalidInputError, TensorNotFoundError

KEY = f"{RESERVED_METADATA_PREFIX}_aliases__"
VERSION = 1


def find_aliases(tensors: Mapping) -> dict[str, str]:
    """``{alias: stored name}`` for tensors that are the same view of the
    same memory as an earlier one (the first name keeps the data). Tensors
    without memory (meta, no elements) are never aliases."""
    first: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    for name, t in tensors.items():
        if t.device.type == "meta" or t.numel() == 0:
            continue
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        kept = first.setdefault(key, name)
        if kept != name:
            aliases[name] = kept
    return aliases


def encode(aliases: Mapping[str, str]) -> dict:
    """The metadata member's value for ``aliases``."""
    return {"version": VERSION, "aliases": dict(aliases)}


def read_aliases(system_metadata: Mapping, names: Iterable[str]) -> dict[str, str]:
    """The ``{alias: stored name}`` a checkpoint records, checked against its
    tensor ``names``: every alias names a stored tensor and is not one."""
    member = system_metadata.get(KEY)
    if member is None:
        return {}
    where = f"corrupt {KEY} metadata"
    if not isinstance(member, dict) or member.get("version") != VERSION:
        version = member.get("version") if isinstance(member, dict) else None
        raise FormatError(f"{where}: expected version {VERSION}, got {version!r}")
    aliases = member.get("aliases")
    if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
        raise FormatError(f"{where}: 'aliases' is not an object of names")
    stored = set(names)
    for alias, target in aliases.items():
        if alias in stored or target not in stored:
            raise FormatError(f"{where}: {alias!r} -> {target!r} must name a stored tensor from a name that "
                              "is not one")
    return aliases


def wanted(names: list[str], aliases: Mapping[str, str], keys) -> list[str]:
    """The names ``keys`` asks for among a checkpoint's stored ``names`` and
    its aliases: all when None, a glob pattern (str), or an iterable of
    names, each of which must exist."""
    every = names + [a for a in aliases if a not in names]
    if keys is None:
        return every
    if isinstance(keys, str):
        return globs.matching(every, keys)
    if not isinstance(keys, Iterable):
        raise InvalidInputError(f"keys must be None, a glob pattern or an iterable of names, got {keys!r}")
    known = set(every)
    keys = list(keys)
    for k in keys:
        if k not in known:
            raise TensorNotFoundError(f"no tensor named {k!r} in the checkpoint")
    return keys


def model_ties(model) -> list[list[str]]:
    """Groups of state-dict names that are one parameter or buffer of
    ``model`` (a module registered twice, tied weights), in registration
    order; names with no twin are left out."""
    groups: dict[int, list[str]] = {}
    for name, t in (*model.named_parameters(remove_duplicate=False),
                    *model.named_buffers(remove_duplicate=False)):
        groups.setdefault(id(t), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def retie(model, ties: list[list[str]]) -> None:
    """Make every name of each group the same object as the group's first
    again: loading with ``assign=True`` wraps each name in its own Parameter,
    which would untie them."""
    for first, *others in ties:
        try:
            kept = model.get_parameter(first)
        except AttributeError:  # not a parameter: a buffer
            kept = model.get_buffer(first)
        for name in others:
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, kept)
