"""``save_pretrained(model, folder)``: what ``model.save_pretrained(folder)``
writes, with the weights as lazystore's.

transformers writes the config, the generation config and (for remote code)
the model's code itself; only its weights are replaced here. The weights are
the state dict transformers would write (keys it ignores on save dropped,
tied weights once, its load-time conversions reverted, so the names are the
checkpoint's, not the model's fused ones), as one ``model.lzy`` or, over
``max_shard_size``, lazystore's sharded folder (``lazystore.index.json``).

A folder holds one model: the weights written replace any transformers or
lazystore weights it held (``model.safetensors``, its shards and index,
``pytorch_model.bin``; ``model.lzy`` or lazystore's shards), removed only
after the new weights are in place, so a failed save leaves the previous
model loadable.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lazystore import api
from lazystore.errors import InvalidInputError
from lazystore.hf.types import PathLike
from lazystore.hf.weights import WEIGHTS_NAME, transformers_weights
from lazystore.interop.sharded import INDEX_NAME
from lazystore.interop.sharded_writer import SHARD_NAME

if TYPE_CHECKING:  # torch, transformers and sentence-transformers are the caller's, imported by then
    import torch
    from sentence_transformers.base.model import BaseModel
    from transformers import PreTrainedModel
    from typing_extensions import TypeIs  # typing's from Python 3.13

# The units transformers and huggingface_hub accept in a max_shard_size ("5GB", "500MiB").
SIZE_UNITS = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
SIZE = re.compile(r"\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]I?B)\s*", re.IGNORECASE)
# save_pretrained's arguments that write somewhere else, or something else than a model's weights.
REFUSED = ("push_to_hub", "variant", "distributed_checkpoint")


def save_pretrained(model: PreTrainedModel | BaseModel, folder: PathLike, compression: str | None = None,
                    max_shard_size: int | str | None = None, *, compression_level: int | None = None,
                    save_original_format: bool = True, state_dict: dict[str, torch.Tensor] | None = None,
                    is_main_process: bool = True, **kwargs: Any) -> None:
    """Write ``model`` to ``folder`` as ``model.save_pretrained(folder)`` does, the weights as lazystore's.

    The weights are ``model.lzy``, or shards with ``lazystore.index.json``;
    the config, generation config and code are transformers' own. Weights
    the folder held before are removed once the new ones are in place.
    Quantized models and PEFT adapters are refused: their weights are not a
    plain state dict.

    Parameters
    ----------
    model : transformers.PreTrainedModel or sentence_transformers model
        The model to save (a sentence-transformers model saves each of its
        transformer modules' weights so).
    folder : str or os.PathLike
        The model folder, created if missing.
    compression : {None, "auto", "zstd", "huffman"}, optional
        Compress the weights.
    max_shard_size : int or str, optional
        Write shards of at most this many bytes (an int, or transformers'
        strings: ``"5GB"``, ``"500MiB"``); None writes one ``model.lzy``.
    compression_level : int, optional
        As ``ls.save``'s.
    save_original_format : bool, optional
        What it means to ``save_pretrained``: the checkpoint's own names,
        transformers' load-time conversions reverted.
    state_dict : dict of str to torch.Tensor, optional
        The weights to write instead of ``model.state_dict()``.
    is_main_process : bool, optional
        False writes nothing, as transformers writes nothing on the other
        processes.
    **kwargs
        ``save_pretrained``'s other keyword arguments, passed to it as they
        are (``push_to_hub``, ``variant`` and ``distributed_checkpoint``
        are refused: they name weights lazystore does not write).

    Raises
    ------
    InvalidInputError
        A refused argument, a quantized or PEFT model, a ``folder`` that is
        a file, a bad ``max_shard_size``, or a ``state_dict`` given for a
        sentence-transformers model.
    """
    refused = [k for k in REFUSED if kwargs.get(k)]
    if refused:
        raise InvalidInputError(f"lazystore.hf.save_pretrained does not take {', '.join(refused)}: it writes "
                                f"{WEIGHTS_NAME} or lazystore's shards into a local folder")
    kwargs = {k: v for k, v in kwargs.items() if k not in REFUSED}
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "_hf_peft_config_loaded", False):
        raise InvalidInputError(f"{type(model).__name__} is quantized or carries PEFT adapters: save it with "
                                "model.save_pretrained (lazystore.hf saves a model's plain weights)")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"{folder}: save_pretrained writes a folder, and this is a file")
    limit = shard_size(max_shard_size)
    if not is_main_process:
        return  # transformers writes nothing on the other processes either
    if _is_sentence_transformer(model):
        if state_dict is not None:
            raise InvalidInputError("state_dict is for a transformers model; a sentence-transformers model saves "
                                    "each of its modules' own")
        _save_sentence_transformer(model, folder, compression, limit, compression_level, kwargs)
        return
    state = _weights(model, state_dict, save_original_format)
    folder.mkdir(parents=True, exist_ok=True)
    if limit is None:
        api.save(state, folder / WEIGHTS_NAME, compression=compression, compression_level=compression_level,
                 metadata={"format": "pt"})
    else:
        api.save(state, folder, compression=compression, compression_level=compression_level,
                 metadata={"format": "pt"}, max_shard_size=limit)
    # The config, generation config and code, written by transformers itself; the
    # empty weights file it writes beside them goes with the old weights below.
    model.save_pretrained(folder, state_dict={}, save_original_format=save_original_format, **kwargs)
    _remove_replaced(folder, sharded=limit is not None)


def _is_sentence_transformer(model: object) -> TypeIs[BaseModel]:
    """Is ``model`` a sentence-transformers model (its library already
    imported, as it must be for such a model to exist)?"""
    st = sys.modules.get("sentence_transformers.base.model")
    return st is not None and isinstance(model, st.BaseModel)


def _save_sentence_transformer(model, folder: Path, compression, limit, compression_level, kwargs) -> None:
    """A sentence-transformers model as ``model.save_pretrained(folder)``
    writes it, each transformer module's weights then rewritten as
    lazystore's in its own folder (``modules.json`` says which)."""
    model.save_pretrained(str(folder), **kwargs)
    modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    for entry in modules:
        inner = getattr(model._modules[entry["name"]], "auto_model", None)
        if inner is not None:
            save_pretrained(inner, folder / entry["path"], compression, limit, compression_level=compression_level)


def shard_size(size) -> int | None:
    """``max_shard_size`` in bytes: an int, or a string as transformers
    takes it ("5GB" is 5 * 10**9 bytes, "5GiB" 5 * 2**30); None for none."""
    if size is None:
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 1:
            raise InvalidInputError(f"max_shard_size must be at least 1 byte, got {size}")
        return size
    m = SIZE.fullmatch(size) if isinstance(size, str) else None
    if m is None:
        raise InvalidInputError(f"max_shard_size must be a number of bytes or a size such as '5GB' or '500MiB', "
                                f"got {size!r}")
    return max(1, int(float(m["value"]) * SIZE_UNITS[m["unit"].upper()]))


def _weights(model, state_dict, save_original_format: bool) -> dict:
    """The state dict ``model.save_pretrained`` writes (transformers 5:
    ``_keys_to_ignore_on_save`` dropped, ``remove_tied_weights_from_state_dict``,
    ``revert_weight_conversion``), as plain contiguous tensors."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    state = dict(model.state_dict() if state_dict is None else state_dict)
    for key in getattr(model, "_keys_to_ignore_on_save", None) or ():
        state.pop(key, None)
    state = remove_tied_weights_from_state_dict(state, model)
    if save_original_format:
        state = revert_weight_conversion(model, state)
    return state


def _remove_replaced(folder: Path, *, sharded: bool) -> None:
    """Remove the weights the new save replaced: transformers' (with the
    empty file ``save_pretrained`` wrote for ``state_dict={}``) and the
    other lazystore layout (the index first, so no index ever names a
    missing shard)."""
    for name in transformers_weights(folder):
        (folder / name).unlink(missing_ok=True)
    if sharded:
        (folder / WEIGHTS_NAME).unlink(missing_ok=True)
    elif (folder / INDEX_NAME).is_file():
        (folder / INDEX_NAME).unlink()
        for shard in folder.iterdir():
            if SHARD_NAME.fullmatch(shard.name):
                shard.unlink(missing_ok=True)
