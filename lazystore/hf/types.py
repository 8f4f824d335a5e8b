"""The types of the arguments lazystore.hf's functions share with
transformers and accelerate, spelled as accelerate spells them.

Annotations only: torch is imported for the type checker, never when
lazystore.hf is imported.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import torch

# Module names to devices: a GPU index, "cpu", "disk", "cuda:0", a torch.device.
DeviceMap: TypeAlias = "dict[str, int | str | torch.device]"
# A dtype to load floating tensors in: torch.float16, or "float16" or "torch.float16".
Dtype: TypeAlias = "str | torch.dtype"
# A local path (or, where a function says so, a URL or a Hub id).
PathLike = str | os.PathLike[str]

__all__ = ["DeviceMap", "Dtype", "PathLike"]
