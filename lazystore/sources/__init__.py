"""Where a checkpoint's bytes come from.

A source needs only ``size`` and ``read_into(offset, out)``; a local file
also offers its memory map so raw tensors become zero-copy views, and a
remote object (:class:`FsspecSource`) fetches many ranges at once with
``read_many``.

:func:`open_source` picks the source for a path or URL: local paths and
``file://`` URLs are memory-mapped files; any other fsspec URL (``s3://``,
``gs://``, ``http(s)://``, ``memory://``, ...) is read remotely.
"""

from lazystore.sources.base import ByteSource
from lazystore.sources.dispatch import is_url, local_path, open_source
from lazystore.sources.local import LocalFile

__all__ = ["ByteSource", "LocalFile", "is_url", "local_path", "open_source"]
