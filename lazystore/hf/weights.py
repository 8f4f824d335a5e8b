"""Which weights a model folder holds, decided in one place for
``from_pretrained``, ``save_pretrained`` and sentence-transformers.

lazystore's weights in a Hugging Face model folder are ``model.lzy`` (one
file, the name transformers' ``model.safetensors`` has, with lazystore's
extension) or ``lazystore.index.json`` beside its shards (what
``ls.save(..., max_shard_size=)`` writes). Transformers' own are
``model.safetensors`` (or its sharded index) and the ``pytorch_model.bin``
pickles.

A folder holding both kinds is ambiguous: one of them is usually left over
from an earlier save (transformers' ``save_pretrained`` does not remove a
``model.lzy``), and loading the stale one would give the wrong model
without a word. So it is refused, naming both, unless the caller says which
(``use_safetensors=True`` picks transformers' weights, ``False`` lazystore's).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from lazystore.errors import FormatError
from lazystore.interop.sharded import INDEX_NAME

# lazystore's weights in a model folder.
WEIGHTS_NAME = "model.lzy"
# transformers' weight files (transformers.utils: SAFE_WEIGHTS_NAME, WEIGHTS_NAME and their indexes).
TRANSFORMERS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                        "pytorch_model.bin.index.json")
# transformers' shard names (model-00001-of-00002.safetensors, pytorch_model-00001-of-00002.bin).
TRANSFORMERS_SHARD = re.compile(r"(model-\d{5}-of-\d{5}\.safetensors|pytorch_model-\d{5}-of-\d{5}\.bin)")


def lazystore_weights(folder, *, use_safetensors=None) -> Path | None:
    """What to open for the lazystore weights of a local model ``folder``
    (``model.lzy``, or the folder itself when it holds a sharded index), or
    None when it holds none (or the caller asked for transformers' weights
    with ``use_safetensors=True``): then transformers loads it as usual.

    A folder with both lazystore and transformers weights raises
    FormatError naming both, unless ``use_safetensors`` says which."""
    folder = Path(folder)
    ours = [n for n in (INDEX_NAME, WEIGHTS_NAME) if (folder / n).is_file()]
    if not ours or use_safetensors:
        return None
    if len(ours) > 1:
        # A save from one layout to the other that was cut short: either may be the newer.
        raise FormatError(f"{folder}: holds both {WEIGHTS_NAME} and {INDEX_NAME} (a save cut short?); remove "
                          "the stale one, or save the model again")
    theirs = transformers_weights(folder)
    if theirs and use_safetensors is None:
        raise FormatError(f"{folder}: holds lazystore weights ({', '.join(ours)}) and transformers weights "
                          f"({', '.join(theirs)}); one is likely left over from an earlier save. Remove the "
                          "stale one, or pass use_safetensors=True to load transformers' weights (False: "
                          "lazystore's)")
    return folder if ours[0] == INDEX_NAME else folder / WEIGHTS_NAME


def require_weights(folder) -> None:
    """Raise FormatError, naming what was looked for, if ``folder`` holds
    neither lazystore's nor transformers' weights (a PEFT adapter folder,
    which names its base model, is transformers' to resolve)."""
    folder = Path(folder)
    found = [n for n in (INDEX_NAME, WEIGHTS_NAME, "adapter_config.json") if (folder / n).is_file()]
    if not found and not transformers_weights(folder):
        raise FormatError(f"{folder}: no model weights: no {WEIGHTS_NAME} or {INDEX_NAME} (lazystore), and no "
                          f"{' or '.join(TRANSFORMERS_WEIGHTS)} (transformers)")


def transformers_weights(folder) -> list[str]:
    """The names of transformers' weight files in ``folder``, sorted."""
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries
                      if e.is_file() and (e.name in TRANSFORMERS_WEIGHTS or TRANSFORMERS_SHARD.fullmatch(e.name)))
