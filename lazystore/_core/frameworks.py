"""Which framework a flat checkpoint's tensors came from, so ``ls.load``
gives them back as that framework's tensors.

A flat dict of torch tensors (a ``state_dict()``) is saved with the reserved
member ``__lazystore_framework__: "torch"`` (docs/format.md §11.6), which
readers' user metadata never shows. Files from elsewhere say it as
safetensors' convention does, ``{"format": "pt"}`` in their metadata (every
file transformers writes), and a safetensors file lazystore writes from
torch tensors carries that entry too, for other tools.
"""

from __future__ import annotations

from collections.abc import Mapping

from lazystore._core.reserved_keys import RESERVED_METADATA_PREFIX

FRAMEWORK_KEY = f"{RESERVED_METADATA_PREFIX}_framework__"
TORCH = "torch"
# safetensors' convention, in the user's metadata.
FORMAT_KEY = "format"
TORCH_FORMAT = "pt"


def saved_from_torch(metadata: Mapping, system_metadata: Mapping) -> bool:
    """Do a flat checkpoint's metadata say its tensors are torch tensors?"""
    return system_metadata.get(FRAMEWORK_KEY) == TORCH or metadata.get(FORMAT_KEY) == TORCH_FORMAT
