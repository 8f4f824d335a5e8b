"""``from_pretrained`` with parts of the model on ``"disk"``: those parts read
their weights from the lazystore file itself at each forward, with no
offload folder and no copy.

transformers' own disk path copies every offloaded weight of a checkpoint
that is not safetensors into ``offload_folder``
(``core_model_loading.offload_and_maybe_resave_param``; its
``accelerate_disk_offload`` indexes only ``.safetensors`` files), and needs
that folder. So transformers never sees "disk" here:

1. the device map is resolved first, as transformers resolves it
   (``_get_device_map`` on the model built on the meta device, with the
   dtype the load will use), so ``"auto"`` and ``max_memory`` mean what
   they mean there;
2. transformers loads the model with the disk modules on ``"cpu"``, their
   parameters given as placeholders: ``[...]`` is an untouched
   ``torch.empty`` of the parameter's shape and dtype (no read, no resident
   memory; buffers, small, are read);
3. :func:`lazystore.hf.offload.dispatch_from_file` dispatches the model by
   the real map: accelerate's hooks put the disk modules' parameters on the
   meta device (the placeholders go) and read them from the file at each
   forward (:class:`~lazystore.hf.offload.FileWeights`, checked).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # transformers is imported only where a model is loaded
    from transformers import PreTrainedModel

# device_map strings transformers resolves into a map of modules (modeling_utils, check_and_set_device_map).
RESOLVED = ("auto", "balanced", "balanced_low_0", "sequential")


def may_offload(device_map) -> bool:
    """Can ``device_map`` put modules on disk: a strategy transformers
    resolves with ``max_memory``, or a map that names "disk"."""
    if isinstance(device_map, str):
        return device_map in RESOLVED
    return isinstance(device_map, dict) and "disk" in device_map.values()


def plan(concrete, config, loading: dict, dtype, model_kwargs: dict, file_names) -> tuple[dict | None, dict, dict]:
    """Where the model goes: the device map with "disk" in it (None when
    nothing goes to disk), ``{file name: Placeholder}`` for the parameters
    on disk, and ``{model name: file name}`` where the two differ (a base
    model loaded from a checkpoint of a model with a head, whose names carry
    the base model's prefix, or the other way round). ``loading``
    (from_pretrained's arguments) is given the map transformers loads by:
    resolved, the disk modules on the CPU."""
    if not may_offload(loading.get("device_map")):
        return None, {}, {}
    device_map, meta = resolve(concrete, config, loading["device_map"], loading.get("max_memory"), dtype,
                               model_kwargs)
    loading["device_map"] = in_memory(device_map)
    if "disk" not in device_map.values():
        return None, {}, {}
    file_names = set(file_names)
    placeholders, renamed = {}, {}
    for name, parameter in disk_parameters(meta, device_map).items():
        stored = stored_name(name, meta.base_model_prefix, file_names)
        if stored is not None:
            placeholders[stored] = Placeholder(parameter)
            if stored != name:
                renamed[name] = stored
    return device_map, placeholders, renamed


def stored_name(name: str, prefix: str, file_names: set) -> str | None:
    """The file's name of the model's parameter ``name``, as transformers
    matches them (``rename_source_key``: the base model's prefix added or
    dropped); None when the file has none (transformers initialises it)."""
    for candidate in (name, name.removeprefix(prefix + "."), f"{prefix}.{name}"):
        if candidate in file_names:
            return candidate
    return None


def resolve(concrete, config, device_map, max_memory, dtype, model_kwargs: dict) -> tuple[dict, PreTrainedModel]:
    """The device map transformers would compute for ``concrete`` built
    from ``config`` in ``dtype``, and that model on the meta device (its
    parameters say which names are parameters, and their dtypes)."""
    import torch
    from transformers.integrations.accelerate import _get_device_map

    with torch.device("meta"):
        model = concrete._from_config(copy.deepcopy(config), dtype=dtype, **model_kwargs)
    if isinstance(device_map, dict):
        return device_map, model
    return _get_device_map(model, device_map, max_memory, None), model


def inside(name: str, modules) -> bool:
    """Is ``name`` a tensor of one of ``modules`` ("" is the whole model)?"""
    return any(m == "" or name == m or name.startswith(m + ".") for m in modules)


def disk_parameters(meta_model, device_map: dict) -> dict:
    """``{name: meta parameter}`` of the parameters placed on disk."""
    disk = [m for m, d in device_map.items() if d == "disk"]
    return {n: p for n, p in meta_model.named_parameters(remove_duplicate=False) if inside(n, disk)}


def in_memory(device_map: dict) -> dict:
    """The map transformers loads by: the disk modules on the CPU."""
    return {m: "cpu" if d == "disk" else d for m, d in device_map.items()}


class Placeholder:
    """``state_dict[name]`` for a parameter that will live on disk:
    ``[...]`` is an untouched ``torch.empty`` in the parameter's own shape
    and dtype, so transformers' ``.to(dtype)`` copies nothing, and no page
    of it is ever resident."""

    __slots__ = ("_dtype", "_shape")

    def __init__(self, parameter):
        self._shape = tuple(parameter.shape)
        self._dtype = parameter.dtype

    def get_shape(self) -> list[int]:
        return list(self._shape)

    def __getitem__(self, index):
        import torch

        return torch.empty(self._shape, dtype=self._dtype)[index]


def dispatch(model, device_map: dict, weights, *, offload_buffers: bool) -> None:
    """Dispatch the loaded ``model`` by the real ``device_map``, its disk
    modules reading from ``weights`` (a FileWeights) at each forward. Hooks
    transformers added for a map of several devices are removed first:
    accelerate's dispatch puts its own."""
    from accelerate.hooks import remove_hook_from_submodules

    from lazystore.hf.offload import dispatch_from_file

    remove_hook_from_submodules(model)
    dispatch_from_file(model, device_map, weights, offload_buffers=offload_buffers,
                       skip_keys=getattr(model, "_skip_keys_device_placement", None))
    model.hf_device_map = dict(device_map)
