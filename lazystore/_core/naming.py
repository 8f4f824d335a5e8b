"""Making a lazystore error name the file it is about.

Some errors name only what failed inside a file ("checksum mismatch in
index", "bad magic at end of file"): the layer that knows which file it was
reading adds the name, keeping the error's type.
"""

from __future__ import annotations

import contextlib
import os

from lazystore.errors import LazyStoreError


@contextlib.contextmanager
def naming(path):
    """Make a lazystore error raised in the block name ``path``. The error
    keeps its type; only its message gains the file's name."""
    try:
        yield
    except LazyStoreError as exc:
        if not isinstance(path, (str, os.PathLike)):  # the error is about the argument itself: it says so
            raise
        name = os.fspath(path)
        if exc.args and isinstance(exc.args[0], str) and name not in exc.args[0]:
            exc.args = (f"{name}: {exc.args[0]}", *exc.args[1:])
        raise
