"""sentence-transformers over lazystore weights: ``sentence_transformer(folder)``
builds the model ``SentenceTransformer(folder)`` would, from a folder whose
transformer weights are lazystore's.

sentence-transformers (6.x) loads the transformer of a model folder in its
``Transformer`` module, through ``AutoModel.from_pretrained`` on the folder,
with no way to hand it a model or a state dict. What it does offer is a
way to load a saved model with some module classes of ``modules.json``
replaced (``_load_with_module_classes``, kept for models "the normal path
cannot reload"): here, each ``Transformer`` class by a subclass whose model
loading goes through :func:`lazystore.hf.from_pretrained`. Everything else
(tokenizer, pooling, normalisation, prompts, ``model_kwargs``, ``device``)
is sentence-transformers' own. A folder whose weights are transformers'
loads as sentence-transformers loads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lazystore._core.distribution import package_hint
from lazystore.errors import FormatError, InvalidInputError, MissingDependencyError
from lazystore.hf.pretrained import from_pretrained
from lazystore.hf.types import PathLike
from lazystore.hf.weights import lazystore_weights

if TYPE_CHECKING:  # sentence-transformers is imported only when a model is loaded
    from sentence_transformers.base.model import BaseModel

# The module classes of modules.json resolved here: only sentence-transformers'
# own (any other class is code from the folder, which sentence-transformers
# imports only with trust_remote_code=True, so it is left to it).
OWN_PREFIX = "sentence_transformers."


def sentence_transformer(model_name_or_path: PathLike, *, verify: bool = True,
                         model_class: type[BaseModel] | None = None, **kwargs: Any) -> BaseModel:
    """``SentenceTransformer(model_name_or_path, **kwargs)`` for a folder whose transformer weights are lazystore's.

    The weights are ``model.lzy`` or lazystore's shards, as
    :func:`lazystore.hf.save_pretrained` writes them. A folder whose
    weights are transformers' loads as sentence-transformers loads it.

    Parameters
    ----------
    model_name_or_path : str or os.PathLike
        The sentence-transformers model folder.
    verify : bool, optional
        Check the weights against their checksums as they are read (the
        default).
    model_class : type, optional
        The sentence-transformers model class to build
        (``SentenceTransformer`` by default; ``CrossEncoder``,
        ``SparseEncoder``...).
    **kwargs
        The model class's own (``device``, ``model_kwargs={"dtype": ...}``,
        ``prompts``, ...).

    Returns
    -------
    sentence_transformers.SentenceTransformer or another sentence-transformers model
        The model, of ``model_class``.

    Raises
    ------
    FormatError
        The folder has no ``modules.json``, or it is not a list of modules.
    InvalidInputError
        A transformer module whose model is neither an encoder nor a decoder.
    MissingDependencyError
        sentence-transformers is not installed.
    """
    try:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules.transformer import Transformer
        from sentence_transformers.util import import_from_string
    except ImportError as e:
        raise MissingDependencyError("lazystore.hf.sentence_transformer needs sentence-transformers: "
                                     f"{package_hint('sentence-transformers')}") from e
    model_class = SentenceTransformer if model_class is None else model_class
    modules_json = Path(model_name_or_path) / "modules.json"
    if not modules_json.is_file():
        raise FormatError(f"{model_name_or_path}: not a sentence-transformers folder (no modules.json)")
    try:
        refs = {entry["type"] for entry in json.loads(modules_json.read_text(encoding="utf-8"))}
    except (ValueError, TypeError, KeyError) as e:
        raise FormatError(f"{modules_json}: not a list of modules ({e})") from None
    classes = {}
    for ref in refs:
        if isinstance(ref, str) and ref.startswith(OWN_PREFIX):
            cls = import_from_string(ref)
            if isinstance(cls, type) and issubclass(cls, Transformer):
                classes[ref] = _reading_lazystore(cls, verify)
    # A str: sentence-transformers tests the name for "/" (a Hub id) before it looks for a folder.
    return model_class._load_with_module_classes(os.fspath(model_name_or_path), classes, **kwargs)


def _reading_lazystore(transformer_class, verify: bool):
    """A subclass of a sentence-transformers ``Transformer`` module class
    whose model is loaded by :func:`lazystore.hf.from_pretrained`, when its
    folder holds lazystore weights."""
    from sentence_transformers.base.modules.transformer import TRANSFORMER_TASK_TO_AUTO_MODEL

    def _load_model(self, model_name_or_path, transformer_task, config, backend, is_peft_model, **model_kwargs):
        folder = Path(model_name_or_path, model_kwargs.get("subfolder") or "")
        if backend != "torch" or is_peft_model or lazystore_weights(folder) is None:
            return super(subclass, self)._load_model(model_name_or_path, transformer_task, config, backend,
                                                     is_peft_model, **model_kwargs)
        auto_class = TRANSFORMER_TASK_TO_AUTO_MODEL.get(transformer_task)
        if auto_class is None or getattr(config, "is_encoder_decoder", False):
            # sentence-transformers picks an encoder-only class for these (T5EncoderModel, ...) itself.
            raise InvalidInputError(f"{folder}: lazystore.hf.sentence_transformer loads encoder and decoder "
                                    f"models; this one is {type(config).__name__} for {transformer_task!r}")
        return from_pretrained(auto_class, model_name_or_path, config=config, verify=verify, **model_kwargs)

    # Named as the class it replaces, in its module: sentence-transformers writes a module's
    # class as its module and name into modules.json, and a model saved again must name its own.
    subclass = type(transformer_class.__name__, (transformer_class,), {
        "_load_model": _load_model,
        "__module__": transformer_class.__module__,
        "__qualname__": transformer_class.__qualname__,
        "__doc__": f"{transformer_class.__name__}, its model loaded from lazystore weights.",
    })
    return subclass
