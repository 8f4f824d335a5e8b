"""The top-level functions: open, load (:mod:`~lazystore.api.reading`),
save and save_async (:mod:`~lazystore.api.saving`).

The other layers (training, torch, numpy, dcp, hf) use these, as users do.
"""

# open_bytes: lazystore.torch's load(bytes), not a top-level function
from lazystore.api.reading import load, open
from lazystore.api.reading import open_bytes as open_bytes
from lazystore.api.saving import save, save_async

__all__ = ["open", "load", "save", "save_async"]
