"""The types of the arguments the top-level functions share."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import BinaryIO

# Which tensors to read (``keys=``, ``select``): a glob pattern, or an
# iterable of exact names. Defined where globs are matched, so that the views
# (an earlier stage) take it too.
from lazystore._core.globs import Names

# What names a checkpoint: a local path, an fsspec URL, or a binary file
# object (``io.BytesIO``, an open file), as torch.save and torch.load take.
Target = str | os.PathLike | BinaryIO
# An encryption key: 32 bytes, or a zero-argument callable returning them.
Key = bytes | Callable[[], bytes]

__all__ = ["Key", "Names", "Target"]
