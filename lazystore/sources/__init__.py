"""Where a checkpoint's bytes come from.

A source needs only ``size`` and ``read_into(offset, out)``; a local file
also offers its memory map so raw tensors become zero-copy views, and a
remote object (:class:`FsspecSource`) fetches many ranges at once with
``read_many``.

:func:`open_source` picks the source for a path or URL: local paths and
``file://`` URLs are memory-mapped files; any other fsspec URL (``s3://``,
``gs://``, ``http(s)://``, ``memory://``, ...) is read remotely.
:func:`open_beside` opens a file by a name another file gave (a delta's
base, a shard): see :mod:`lazystore.sources.safe_files`.
"""

from lazystore.sources.base import ByteSource
from lazystore.sources.dispatch import is_url, local_path, open_source
from lazystore.sources.local import LocalFile
from lazystore.sources.safe_files import open_beside, open_in_folder

__all__ = ["ByteSource", "LocalFile", "is_url", "local_path", "open_beside", "open_in_folder", "open_source"]
