"""Where a checkpoint's bytes come from.

A source needs only ``size`` and ``read_into(offset, out)``; a local file
also offers its memory map so raw tensors become zero-copy views.
"""

from .base import ByteSource
from .local import LocalFile

__all__ = ["ByteSource", "LocalFile"]
