"""Other formats, and converting between them and lazystore.

- :mod:`~lazystore.interop.detect`: which format a file is in, and opening
  a checkpoint file (lazystore or safetensors) as a view.
- :mod:`~lazystore.interop.safetensors`: safetensors headers read as
  lazystore indexes; :class:`SafetensorsWriter`.
- :mod:`~lazystore.interop.sharded`: folders of shards (lazystore's and
  Hugging Face's): opened as one view, written by :class:`ShardedWriter`.
- :mod:`~lazystore.interop.archives`: torch zips and ``.npz`` read (never
  unpickled) for conversion; :mod:`~lazystore.interop.npz` streams each
  ``.npz`` member once.
- :mod:`~lazystore.interop.convert`: the converters, re-exported here:
  ``from lazystore.interop import from_torch, to_safetensors``.
"""

from lazystore.interop.convert import (
    carried_metadata,
    carried_system_metadata,
    copy,
    digest_of,
    from_npz,
    from_safetensors,
    from_torch,
    open_verified,
    to_lazystore,
    to_safetensors,
)
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.interop.sharded_writer import ShardedWriter

__all__ = ["SafetensorsWriter", "ShardedWriter", "carried_metadata", "carried_system_metadata", "copy", "digest_of",
           "from_npz", "from_safetensors", "from_torch", "open_verified", "to_lazystore", "to_safetensors"]
