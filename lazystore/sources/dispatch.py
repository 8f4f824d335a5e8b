"""Which source a path or URL gets: :func:`open_source`; and telling URLs from local paths."""

from __future__ import annotations

import os
import re

from lazystore.errors import InvalidInputError
from lazystore.sources.base import ByteSource
from lazystore.sources.local import LocalFile

# "scheme://..." or a chained fsspec URL ("simplecache::s3://...").
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*(://|::)")


def is_url(path) -> bool:
    """A URL rather than a local path (only str paths can be URLs)."""
    # Most paths hold neither "://" nor "::": the substring test spares them
    # the regex, which costs tens of microseconds from cold caches.
    return isinstance(path, str) and ("://" in path or "::" in path) and _URL.match(path) is not None


def local_path(path):
    """The local path of ``path`` if it names a local file (a path, or a
    ``file://`` URL), else None."""
    if not is_url(path):
        try:
            return os.fspath(path)
        except TypeError:  # a caller's bad argument, not a missing file
            raise InvalidInputError(f"expected a path (str or os.PathLike) or a URL, got "
                                    f"{type(path).__name__} {path!r}") from None
    if path.startswith("file://"):
        rest = path[len("file://"):]
        return rest[len("localhost"):] if rest.startswith("localhost/") else rest
    return None


def open_source(path, storage_options=None, *, mmap: bool = True) -> ByteSource:
    """The source of a local path or ``file://`` URL (memory-mapped, unless
    ``mmap=False``), or of any other fsspec URL (range requests; needs
    the ``remote`` extra). ``storage_options`` go to the fsspec filesystem;
    local paths ignore them."""
    local = local_path(path)
    if local is not None:
        return LocalFile(local, mmap=mmap)
    from lazystore.sources.fsspec import FsspecSource

    return FsspecSource(path, storage_options)

