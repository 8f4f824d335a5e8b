"""The types of a nested state's pieces (:mod:`lazystore.views.tree`): the
nodes of its stored tree and its tensor leaves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

if TYPE_CHECKING:  # torch is imported only where a torch tensor is met
    import torch

# A node of a stored tree: a JSON object, ``{"t": node type, ...}``
# (docs/format.md, section 11.7).
Node = dict[str, Any]
# A tensor leaf: a numpy array or scalar, or a torch tensor.
Leaf: TypeAlias = "np.ndarray | np.generic | torch.Tensor"

__all__ = ["Leaf", "Node"]
