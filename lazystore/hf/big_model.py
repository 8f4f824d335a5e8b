"""accelerate's ``load_checkpoint_in_model`` and ``load_checkpoint_and_dispatch``
for lazystore checkpoints: the same names, parameters and return values as
accelerate 1.15's, so migrating is an import change.

A lazystore file, a folder holding one (``config.json`` + ``model.lzy``),
a sharded lazystore folder or its ``lazystore.index.json`` is loaded here;
anything else (safetensors, ``pytorch_model.bin``, Hugging Face indexes) is
handed to accelerate's own function unchanged. Where accelerate differs
for a lazystore checkpoint:

- modules on ``"disk"`` read their weights from the checkpoint itself at
  each forward (:func:`lazystore.hf.offload.dispatch_from_file`), so
  ``offload_folder`` is not needed; given, it is neither created nor
  written to;
- tensors are read one at a time, checked against their checksums, so no
  shard is ever held whole and ``offload_state_dict`` has nothing to save
  (accepted, no effect);
- persistent buffers of disk modules kept in memory get the checkpoint's
  values (accelerate leaves them as the model built them);
- ``offload_8bit_bnb`` (8-bit weights quantized into the offload folder) is
  refused: there is no folder to quantize into.
"""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from lazystore._core import ties, torch_arrays
from lazystore._core.torch_reads import tensors_of
from lazystore._native.layout import MAGIC
from lazystore.errors import FormatError, InvalidInputError, StateDictMismatchError
from lazystore.hf.offload import FileWeights, dispatch_from_file, module_of, open_named, require_accelerate
from lazystore.hf.types import DeviceMap, Dtype, PathLike
from lazystore.interop.sharded import INDEX_NAME

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

# What load_checkpoint_and_dispatch takes as a device_map string (accelerate's list).
DEVICE_MAP_STRINGS = ("auto", "balanced", "balanced_low_0", "sequential")


def load_checkpoint_in_model(model: torch.nn.Module, checkpoint: PathLike, device_map: DeviceMap | None = None,
                             offload_folder: PathLike | None = None, dtype: Dtype | None = None,
                             offload_state_dict: bool = False, offload_buffers: bool = False,
                             keep_in_fp32_modules: list[str] | None = None, offload_8bit_bnb: bool = False,
                             strict: bool = False,
                             full_state_dict: bool = True, broadcast_from_rank0: bool = False) -> None:
    """Load a checkpoint into ``model``, as accelerate's function does.

    Each tensor is sent to the device ``device_map`` gives its module (see
    the module's docstring for the differences with a lazystore
    checkpoint). Modules on ``"disk"`` are left on the meta device, in
    ``dtype``: dispatch the model with :func:`dispatch_from_file` (or call
    :func:`load_checkpoint_and_dispatch`), which reads them from the file at
    each forward. accelerate's ``dispatch_model`` would look for them in an
    offload folder, where nothing was written.

    Parameters
    ----------
    model : torch.nn.Module
        The model to load into.
    checkpoint : str or os.PathLike
        A lazystore file, a folder holding one, a sharded lazystore folder or
        its ``lazystore.index.json``; anything else goes to accelerate's
        function unchanged.
    device_map : dict of str to int or str or torch.device, optional
        Module names to devices (``"disk"`` included); None loads the whole
        state dict into the model where it is.
    offload_folder : str or os.PathLike, optional
        Not needed for a lazystore checkpoint: neither created nor written to.
    dtype : torch.dtype or str, optional
        The dtype floating tensors are loaded in (``"float16"`` or
        ``"torch.float16"`` too).
    offload_state_dict : bool, optional
        Accepted, no effect: no shard is ever held whole.
    offload_buffers : bool, optional
        Buffers of disk modules are read at each forward too, as parameters
        are; else they are loaded into memory.
    keep_in_fp32_modules : list of str, optional
        Modules kept in float32 when ``dtype`` is float16 (accelerate's rule).
    offload_8bit_bnb : bool, optional
        Must be False for a lazystore checkpoint: there is no offload folder
        to quantize into.
    strict : bool, optional
        The checkpoint's names and the model's must be the same.
    full_state_dict, broadcast_from_rank0 : bool, optional
        torch's ``StateDictOptions``, without a device map.

    Raises
    ------
    FormatError
        ``checkpoint`` claims to be lazystore's (its magic, a ``.lzy`` file,
        a lazystore index) but does not open.
    InvalidInputError
        ``offload_8bit_bnb=True`` with a lazystore checkpoint, or a tensor
        that no entry of ``device_map`` covers.
    StateDictMismatchError
        ``strict=True`` and the checkpoint's names differ from the model's.
    ChecksumError
        A tensor read fails its checksums.
    MissingDependencyError
        accelerate is not installed.
    """
    found = _lazystore_checkpoint(checkpoint)
    if found is None:
        return require_accelerate().load_checkpoint_in_model(
            model, checkpoint, device_map=device_map, offload_folder=offload_folder, dtype=dtype,
            offload_state_dict=offload_state_dict, offload_buffers=offload_buffers,
            keep_in_fp32_modules=keep_in_fp32_modules, offload_8bit_bnb=offload_8bit_bnb, strict=strict,
            full_state_dict=full_state_dict, broadcast_from_rank0=broadcast_from_rank0)
    _, view = found
    with view:
        _load(model, view, device_map=device_map, dtype=dtype, offload_buffers=offload_buffers,
              keep_in_fp32_modules=keep_in_fp32_modules, offload_8bit_bnb=offload_8bit_bnb, strict=strict,
              full_state_dict=full_state_dict, broadcast_from_rank0=broadcast_from_rank0)
    return None


def load_checkpoint_and_dispatch(model: torch.nn.Module, checkpoint: PathLike,
                                 device_map: DeviceMap | str | None = None,
                                 max_memory: dict[int | str, int | str] | None = None,
                                 no_split_module_classes: list[str] | None = None,
                                 offload_folder: PathLike | None = None, offload_buffers: bool = False,
                                 dtype: Dtype | None = None, offload_state_dict: bool | None = None,
                                 skip_keys: str | list[str] | None = None,
                                 preload_module_classes: list[str] | None = None, force_hooks: bool = False,
                                 strict: bool = False, full_state_dict: bool = True,
                                 broadcast_from_rank0: bool = False) -> torch.nn.Module:
    """Load a checkpoint into ``model`` and dispatch it across devices, as accelerate's function does.

    Modules on ``"disk"`` read their weights from the lazystore checkpoint
    at each forward; nothing is written to ``offload_folder``. A checkpoint
    that is not lazystore's goes to accelerate's function unchanged.

    Parameters
    ----------
    model : torch.nn.Module
        The model to load into and dispatch.
    checkpoint : str or os.PathLike
        As for :func:`load_checkpoint_in_model`.
    device_map : dict of str to int or str or torch.device, or str, optional
        Module names to devices, or one of "auto", "balanced",
        "balanced_low_0" or "sequential", computed with accelerate's own
        ``get_balanced_memory`` and ``infer_auto_device_map`` from
        ``max_memory`` exactly as accelerate computes it. None loads without
        dispatching.
    max_memory : dict of int or str to int or str, optional
        The memory each device may use, for a ``device_map`` string.
    no_split_module_classes : list of str, optional
        Module classes never split across devices.
    offload_folder : str or os.PathLike, optional
        Not needed for a lazystore checkpoint: nothing is written to it.
    offload_buffers : bool, optional
        Buffers of disk modules are read at each forward too.
    dtype : torch.dtype or str, optional
        The dtype floating tensors are loaded in.
    offload_state_dict : bool, optional
        Accepted, no effect.
    skip_keys : str or list of str, optional
        accelerate's ``dispatch_model``'s.
    preload_module_classes : list of str, optional
        accelerate's ``dispatch_model``'s.
    force_hooks : bool, optional
        accelerate's ``dispatch_model``'s.
    strict : bool, optional
        The checkpoint's names and the model's must be the same.
    full_state_dict, broadcast_from_rank0 : bool, optional
        torch's ``StateDictOptions``, without a device map.

    Returns
    -------
    torch.nn.Module
        The model, dispatched as ``dispatch_model`` returns it (as it is
        without a ``device_map``).

    Raises
    ------
    InvalidInputError
        A ``device_map`` string accelerate does not know, or as for
        :func:`load_checkpoint_in_model`.
    FormatError
        ``checkpoint`` claims to be lazystore's but does not open.
    StateDictMismatchError
        ``strict=True`` and the names differ, or the file lacks a tensor of
        a disk module or holds it in another shape.
    ChecksumError
        A tensor read fails its checksums.
    MissingDependencyError
        accelerate is not installed.
    """
    utils = require_accelerate()
    found = _lazystore_checkpoint(checkpoint)
    if found is None:
        from accelerate import load_checkpoint_and_dispatch as theirs

        return theirs(model, checkpoint, device_map=device_map, max_memory=max_memory,
                      no_split_module_classes=no_split_module_classes, offload_folder=offload_folder,
                      offload_buffers=offload_buffers, dtype=dtype, offload_state_dict=offload_state_dict,
                      skip_keys=skip_keys, preload_module_classes=preload_module_classes, force_hooks=force_hooks,
                      strict=strict, full_state_dict=full_state_dict, broadcast_from_rank0=broadcast_from_rank0)
    path, view = found
    placement: DeviceMap | None = None if isinstance(device_map, str) else device_map
    with view:
        if isinstance(device_map, str):
            if device_map not in DEVICE_MAP_STRINGS:
                raise InvalidInputError(f"device_map must be a dict or one of {', '.join(DEVICE_MAP_STRINGS)}, "
                                        f"got {device_map!r}")
            if device_map != "sequential":
                max_memory = utils.get_balanced_memory(model, max_memory=max_memory,
                                                       no_split_module_classes=no_split_module_classes,
                                                       dtype=dtype, low_zero=(device_map == "balanced_low_0"))
            placement = utils.infer_auto_device_map(model, max_memory=max_memory,
                                                    no_split_module_classes=no_split_module_classes,
                                                    dtype=dtype, offload_buffers=offload_buffers)
        _load(model, view, device_map=placement, dtype=dtype, offload_buffers=offload_buffers,
              keep_in_fp32_modules=None, offload_8bit_bnb=False, strict=strict, full_state_dict=full_state_dict,
              broadcast_from_rank0=broadcast_from_rank0)
    if placement is None:
        return model
    return dispatch_from_file(model, placement, FileWeights(path), offload_buffers=offload_buffers,
                              skip_keys=skip_keys, preload_module_classes=preload_module_classes,
                              force_hooks=force_hooks)


# -- which checkpoints are lazystore's ---------------------------------------------


def _lazystore_checkpoint(checkpoint):
    """``(path, open view)`` when ``checkpoint`` is a lazystore checkpoint,
    None for anything accelerate should load. A checkpoint that claims to
    be lazystore's (its magic, a ``.lzy`` file, a lazystore index) but does
    not open raises lazystore's error naming it."""
    try:
        path = os.fspath(checkpoint)
    except TypeError:
        return None  # accelerate's own error for what is no path
    if os.path.isfile(path) and path.endswith(".json"):
        if os.path.basename(path) != INDEX_NAME:
            return None  # Hugging Face's index: accelerate's
        path = os.path.dirname(path) or "."
    if not os.path.exists(path):
        return None
    try:
        view = open_named(path)
    except FormatError:
        if _claims_lazystore(Path(path)):
            raise
        return None
    if view.format.split(" ")[0] != "lazystore":  # "lazystore (sharded)" for a folder of shards
        view.close()
        return None
    return path, view


def _claims_lazystore(path: Path) -> bool:
    if path.is_dir():
        return (path / INDEX_NAME).is_file() or any(p.suffix == ".lzy" for p in path.iterdir())
    if path.suffix == ".lzy":
        return True
    try:
        with path.open("rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


# -- loading ------------------------------------------------------------------------


def _load(model, view, *, device_map, dtype, offload_buffers, keep_in_fp32_modules, offload_8bit_bnb, strict,
          full_state_dict, broadcast_from_rank0) -> None:
    """accelerate's load_checkpoint_in_model over an open lazystore view."""
    utils = require_accelerate()
    torch = torch_arrays.require("loading a model needs PyTorch")
    if offload_8bit_bnb:
        raise InvalidInputError(f"{view.name}: offload_8bit_bnb quantizes weights into an offload folder; with "
                                "a lazystore checkpoint, disk modules read the file itself: leave it False")
    tied_params = utils.find_tied_parameters(model)
    if device_map is not None:
        utils.check_tied_parameters_on_same_device(tied_params, device_map)
    if isinstance(dtype, str):  # "torch.float16" or "float16", as accelerate takes it
        dtype = getattr(torch, dtype.replace("torch.", ""))
    stored = list(view)
    aliases = ties.read_aliases(view.system_metadata, stored)
    names = stored + [a for a in aliases if a not in stored]
    model_keys = set(model.state_dict())
    unexpected = [n for n in names if n not in model_keys]
    if strict:
        _check_strict(view, model_keys, names, unexpected)
    if device_map is None:
        _load_whole(model, view, torch, strict, full_state_dict, broadcast_from_rank0)
    else:
        _load_placed(model, view, device_map, dtype, offload_buffers, keep_in_fp32_modules, aliases,
                     [n for n in names if n in model_keys])
    if unexpected and not strict:
        logger.warning(f"Some weights of the model checkpoint at {view.name} were not used when initializing "
                       f"{type(model).__name__}: {set(unexpected)}.")
    utils.retie_parameters(model, tied_params)


def _check_strict(view, model_keys, names, unexpected) -> None:
    missing = sorted(model_keys - set(names))
    if missing or unexpected:
        raise StateDictMismatchError(f"Error(s) in loading state_dict from {view.name}: missing key(s): "
                                     f"{missing[:8]}{' ...' if len(missing) > 8 else ''}, unexpected key(s): "
                                     f"{unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")


def _load_whole(model, view, torch, strict, full_state_dict, broadcast_from_rank0) -> None:
    """No device map: the whole state dict into the model, as accelerate
    loads it (torch's set_model_state_dict where it can, else load_state_dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    state = tensors_of(view, None, None, verify=True)
    devices = {t.device for t in model.state_dict().values() if isinstance(t, torch.Tensor)}
    if len(devices - {torch.device("meta")}) <= 1:
        options = StateDictOptions(full_state_dict=full_state_dict, strict=strict,
                                   broadcast_from_rank0=broadcast_from_rank0)
        set_model_state_dict(model, state, options=options)
    else:
        model.load_state_dict(state, strict=strict)
    del state
    gc.collect()


def _load_placed(model, view, device_map, dtype, offload_buffers, keep_in_fp32_modules, aliases, names) -> None:
    """Each tensor to its module's device, read one at a time (checked);
    tensors of disk modules are not read at all: they become meta tensors
    of the dtype the hook will cast to."""
    from accelerate.utils import set_module_tensor_to_device

    torch = torch_arrays.require()
    tied_targets = set(aliases.values())
    buffers = {n for n, _ in model.named_buffers()}
    shared: dict[str, object] = {}  # tensors other names alias, read once for all of them
    for name in names:
        if "SCB" in name:  # 8-bit statistics, skipped as accelerate skips them
            continue
        device = device_map[module_of(name, device_map, view.name)]
        stored = aliases.get(name, name)
        info = view.info(stored)
        new_dtype = _dtype_for(name, info, dtype, keep_in_fp32_modules, torch)
        if device == "disk" and (offload_buffers or name not in buffers):
            set_module_tensor_to_device(model, name, "meta", dtype=new_dtype or torch_arrays.torch_dtype_of(info.dtype))
            continue
        value = shared.get(stored)
        if value is None:
            value = torch_arrays.cpu_tensor(view.load([stored], verify=True)[stored])
            if stored in tied_targets:
                shared[stored] = value
        # A disk module's buffer that stays in memory waits on the CPU for the
        # hook to move it to the execution device.
        set_module_tensor_to_device(model, name, "cpu" if device == "disk" else device, value=value, dtype=new_dtype)
    gc.collect()


def _dtype_for(name, info, dtype, keep_in_fp32_modules, torch):
    """The dtype ``name`` is loaded in: ``dtype`` for floating tensors,
    float32 for keep_in_fp32_modules when ``dtype`` is float16 (accelerate's rule)."""
    if dtype is None or not torch_arrays.torch_dtype_of(info.dtype).is_floating_point:
        return None
    if keep_in_fp32_modules is not None and dtype == torch.float16:
        for key in keep_in_fp32_modules:
            if (key in name and key + "." in name) or key == name:
                return torch.float32
    return dtype
