"""PyTorch-native loading and saving, as drop-ins for ``safetensors.torch``.

``from lazystore.torch import save_file, load_file`` where the code had
``from safetensors.torch import save_file, load_file``: the same functions,
names and parameters (``save_file``, ``load_file``, ``save``, ``load``,
``save_model``, ``load_model``), over lazystore files, which ``load_file``
reads lazily (``keys=``) and which may be compressed. ``safe_open`` (also
``lazystore.safe_open``) is safetensors' lazy handle. docs/torch.md lists the
differences, one line each.

Nothing here imports torch until a function needs it: ``import lazystore``
stays free of torch.
"""

from lazystore.errors import StateDictMismatchError
from lazystore.torch.files import load, load_file, save, save_file
from lazystore.torch.handle import SafeSlice, safe_open
from lazystore.torch.models import load_model, save_model

__all__ = ["SafeSlice", "StateDictMismatchError", "load", "load_file", "load_model", "safe_open", "save",
           "save_file", "save_model"]
