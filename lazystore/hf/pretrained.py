"""``from_pretrained(cls, folder, **kwargs)``: transformers' loading, from a
folder whose weights are lazystore's.

transformers (5.x) has no extension point for weight formats: it looks for
``model.safetensors`` or ``pytorch_model.bin`` by name. It does take a
state dict instead of a folder (``from_pretrained(None, config=...,
state_dict=...)``, concrete classes only), and from there does everything
else itself: the dtype, renaming keys, tied weights, initialising missing
ones, building on the meta device and placing each parameter by the
``device_map``. So this module does only what the folder would have told
transformers: the config (and the concrete class, for ``AutoModel*``
classes), the state dict (lazy, checked handles: :mod:`.slices`), the
``dtype="auto"`` a config without one leaves to the weights, and, after
loading, the config's ``name_or_path`` and the generation config, as
transformers sets them for a folder. Nothing of transformers is patched.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lazystore.errors import InvalidInputError
from lazystore.hf import disk, slices
from lazystore.hf.offload import FileWeights
from lazystore.hf.types import PathLike
from lazystore.hf.weights import lazystore_weights, require_weights

if TYPE_CHECKING:  # transformers is imported only where a model is loaded
    from transformers import PreTrainedModel
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

# What PreTrainedModel.from_pretrained (transformers 5.23) takes for itself;
# everything else is a config attribute or an argument of the model's
# __init__, which the config loader sorts out (return_unused_kwargs).
LOADING = frozenset({
    "state_dict", "tqdm_class", "output_loading_info", "_from_pipeline", "_from_auto", "dtype", "torch_dtype",
    "device_map", "max_memory", "offload_folder", "offload_buffers", "quantization_config", "variant",
    "adapter_kwargs", "adapter_name", "generation_config", "gguf_file", "distributed_config", "device_mesh",
    "tp_plan", "tp_size", "allow_all_kernels", "use_kernels", "kernel_config", "key_mapping", "mirror",
    "_fast_init", "low_cpu_mem_usage", "from_tf", "from_flax", "offload_state_dict", "ignore_mismatched_sizes",
    "use_safetensors", "weights_only", "fusion_config", "disable_mmap", "_commit_hash",
})
# Where a model comes from: the config loader and the generation config need them too.
HUB = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
# The config loader's own, beside HUB.
CONFIG_ONLY = ("trust_remote_code", "code_revision")
# Not for a lazystore folder: a state dict replaces the folder's weights, a GGUF file is another format.
REFUSED = ("state_dict", "gguf_file")


def from_pretrained(cls: type[PreTrainedModel] | type[_BaseAutoModelClass], pretrained_model_name_or_path: PathLike,
                    *model_args: Any, verify: bool = True,
                    **kwargs: Any) -> PreTrainedModel | tuple[PreTrainedModel, dict[str, Any]]:
    """``cls.from_pretrained(pretrained_model_name_or_path, ...)``, for a folder with lazystore weights too.

    A local folder holding ``model.lzy`` or lazystore's sharded index loads
    those weights, with every argument transformers takes meaning what it
    means there: the model is built on the meta device and each tensor is
    read from the file when transformers places it, so memory peaks at
    about the weights. Anything else (a folder of safetensors, a Hub id) is
    ``cls.from_pretrained``'s to load, unchanged.

    Parameters
    ----------
    cls : type
        A transformers model class: an ``AutoModel*`` class or a concrete
        one (``BertModel``).
    pretrained_model_name_or_path : str or os.PathLike
        The model folder (or, for transformers, a Hub id).
    *model_args
        Passed to the model's ``__init__``, as by ``from_pretrained``.
    verify : bool, optional
        Check each tensor against its checksums as it is read (the
        default; ``ls.ChecksumError`` names a damaged one).
    **kwargs
        ``from_pretrained``'s own (``dtype``/``torch_dtype``, ``device_map``
        with ``max_memory``, config overrides, ``output_loading_info``,
        ``use_safetensors``, ...).

    Returns
    -------
    transformers.PreTrainedModel or tuple
        The model, or with ``output_loading_info=True`` the model and its
        loading info, as ``from_pretrained`` returns them.

    Raises
    ------
    FormatError
        The folder holds both lazystore and transformers weights and
        ``use_safetensors`` does not say which (True: transformers'), or it
        holds no weights at all.
    InvalidInputError
        ``cls`` is not a transformers model class, an ``AutoModel*`` class
        has no model for the config, or ``state_dict``/``gguf_file`` is
        given with a folder of lazystore weights.
    ChecksumError
        A tensor read fails its checksums.
    """
    folder = pretrained_model_name_or_path
    local = None
    if isinstance(folder, (str, os.PathLike)) and os.path.isdir(Path(folder, kwargs.get("subfolder") or "")):
        local = Path(folder, kwargs.get("subfolder") or "")
    weights = lazystore_weights(local, use_safetensors=kwargs.get("use_safetensors")) if local else None
    if weights is None:
        if local and kwargs.get("gguf_file") is None and kwargs.get("state_dict") is None:
            require_weights(local)
        return cls.from_pretrained(folder, *model_args, **kwargs)
    if not isinstance(cls, type) or not (hasattr(cls, "_model_mapping") or getattr(cls, "config_class", None)):
        raise InvalidInputError(f"{cls!r} is not a transformers model class: pass an AutoModel* class or a "
                                "PreTrainedModel subclass (BertModel, ...)")
    for name in REFUSED:
        if kwargs.get(name) is not None:
            raise InvalidInputError(f"{name} cannot be passed with a folder of lazystore weights ({weights})")
    loading = {k: kwargs.pop(k) for k in list(kwargs) if k in LOADING}
    loading.pop("use_safetensors", None)  # the choice is made: lazystore's weights
    hub = {k: kwargs[k] for k in HUB if k in kwargs}
    config, concrete, model_kwargs = _config_and_class(cls, folder, kwargs)
    with slices.Weights(weights, verify=verify) as files:
        if _dtype_left_to_weights(loading, config):
            loading["dtype"] = slices.weights_dtype(files)
        generation_config = loading.pop("generation_config", None)
        offloaded, placeholders, renamed = disk.plan(concrete, config, loading, _torch_dtype(loading, config),
                                                     model_kwargs, files.names())
        loaded = concrete.from_pretrained(None, *model_args, config=config,
                                          state_dict=files.state_dict(instead=placeholders),
                                          trust_remote_code=kwargs.get("trust_remote_code"),
                                          **loading, **model_kwargs)
    model = loaded[0] if loading.get("output_loading_info") else loaded
    if offloaded is not None:
        disk.dispatch(model, offloaded, FileWeights(weights, names=renamed, verify=verify),
                      offload_buffers=loading.get("offload_buffers", False))
    _as_from_folder(model, folder, generation_config, loading, hub, kwargs.get("trust_remote_code"), model_kwargs)
    return loaded


def _config_and_class(cls, folder, kwargs: dict):
    """The config of ``folder``, the concrete model class to build, and the
    keyword arguments left for its ``__init__``, as ``cls.from_pretrained``
    would resolve them (an ``AutoModel*`` class through ``AutoConfig``, a
    concrete one through its ``config_class``), given config overrides in
    ``kwargs`` (the loading arguments already taken out)."""
    from transformers import AutoConfig, PreTrainedConfig

    config = kwargs.pop("config", None)
    auto = hasattr(cls, "_model_mapping")
    if isinstance(config, PreTrainedConfig):
        config = copy.deepcopy(config)  # transformers never changes the caller's
        model_kwargs = kwargs
    else:
        # AutoConfig takes trust_remote_code and code_revision; a concrete class's config loader does not.
        loader, own = (AutoConfig, ()) if auto else (cls.config_class, CONFIG_ONLY)
        config, model_kwargs = loader.from_pretrained(config if config is not None else folder,
                                                      return_unused_kwargs=True,
                                                      **{k: v for k, v in kwargs.items() if k not in own})
    model_kwargs = {k: v for k, v in model_kwargs.items() if k not in HUB and k not in CONFIG_ONLY}
    return config, _concrete(cls, config) if auto else cls, model_kwargs


def _concrete(auto_cls, config):
    """The class an ``AutoModel*`` class builds for ``config``."""
    from transformers.models.auto.auto_factory import _get_model_class

    if type(config) not in auto_cls._model_mapping:
        raise InvalidInputError(f"{auto_cls.__name__} has no model class for {type(config).__name__} (model_type "
                                f"{getattr(config, 'model_type', None)!r}); lazystore.hf loads models transformers "
                                "itself defines, not remote code")
    return _get_model_class(config, auto_cls._model_mapping)


def _dtype_left_to_weights(loading: dict, config) -> bool:
    """Does transformers take the dtype from the weights? ``dtype="auto"``
    (its default) with a config that names none: then it reads the first
    floating tensor's dtype, which a state dict of handles cannot tell it."""
    dtype = loading.get("dtype")
    if dtype is None:
        dtype = loading.get("torch_dtype")
    return dtype in (None, "auto") and getattr(config, "dtype", None) is None


def _torch_dtype(loading: dict, config):
    """The torch dtype transformers builds the model in (``_get_dtype``):
    ``dtype`` (or ``torch_dtype``) as a torch dtype, its name, or a dict of
    them whose "" entry is the model's; "auto" is the config's (which names
    one by now: the weights' was put in ``loading`` where it did not)."""
    import torch

    dtype = loading.get("dtype")
    if dtype is None:
        dtype = loading.get("torch_dtype")
    if isinstance(dtype, dict):
        dtype = dtype.get("", torch.get_default_dtype())
    if dtype in (None, "auto"):
        dtype = getattr(config, "dtype", None) or torch.get_default_dtype()
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def _as_from_folder(model, folder, generation_config, loading: dict, hub: dict, trust_remote_code,
                    model_kwargs: dict) -> None:
    """What transformers sets from the folder it loaded: the config's
    ``name_or_path``, and a generative model's generation config
    (``generation_config.json``, else derived from ``config.json``)."""
    model.config.name_or_path = folder
    if model.can_generate() and hasattr(model, "adjust_generation_fn"):
        model.adjust_generation_fn(generation_config, loading.get("_from_auto", False), loading.get("_from_pipeline"),
                                   folder, hub.get("cache_dir"), hub.get("force_download", False),
                                   hub.get("proxies"), hub.get("local_files_only", False), hub.get("token"),
                                   hub.get("revision"), hub.get("subfolder", ""), trust_remote_code, **model_kwargs)
