"""Reading what a signature would claim of a file: its index's location and
SHA-256, recorded from the very bytes an open parses (an anchor that checks
nothing, see :mod:`lazystore.signing.anchor`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from lazystore._native import layout as fmt
from lazystore.errors import InvalidInputError
from lazystore.interop.detect import open_view
from lazystore.signing import claims as signed
from lazystore.signing.anchor import index_reader
from lazystore.sources import open_source


class Recorder:
    """Records the index of the file being opened (an anchor for
    :func:`lazystore.interop.detect.open_view`)."""

    size: int
    trailer: fmt.Trailer
    index_sha256: str
    system_metadata: dict

    def __init__(self, need_digests: bool):
        self._need_digests = need_digests

    def reader(self, kind: str, read, name: str):
        return index_reader(kind, read, name, InvalidInputError, self._record, lambda index: self._claim(index, name))

    def _claim(self, index, name: str) -> None:
        self.system_metadata = index.system_metadata
        if self._need_digests:
            signed.refuse_legacy_delta(index.entries["codec"], name)
            self.claims = signed.of_index(self.size, self.trailer, self.index_sha256, index.system_metadata, name)

    def _record(self, size: int, trailer: fmt.Trailer, index) -> None:
        self.size, self.trailer, self.index_sha256 = size, trailer, hashlib.sha256(index).hexdigest()


def record(path, *, need_digests: bool, storage_options=None) -> Recorder:
    """What a signature of the lazystore file at ``path`` claims (with
    ``need_digests``, refusing a file that cannot be signed), from its tail."""
    recorder = Recorder(need_digests)
    with open_view(open_source(path, storage_options, mmap=False), anchor=recorder):
        return recorder


def index_sha256(path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None) -> str:
    """The SHA-256 (hex) of a lazystore file's index.

    What ``ls.open(path, index_sha256=...)`` pins, and what ``lazystore
    info`` prints. Only the file's tail is read.

    Parameters
    ----------
    path : str or os.PathLike
        A lazystore file: a local path or an fsspec URL.
    storage_options : Mapping, optional
        Options of the URL's fsspec filesystem; local paths ignore them.

    Returns
    -------
    str
        The index's SHA-256, as 64 hex characters.

    Raises
    ------
    InvalidInputError
        ``path`` is a folder (each shard has its own index), or a file
        that is not a lazystore file.
    FormatError
        The file is not a valid checkpoint.
    """
    if os.path.isdir(path) if isinstance(path, (str, os.PathLike)) else False:
        raise InvalidInputError(f"{path}: a folder; each shard has its own index")
    return record(path, need_digests=False, storage_options=storage_options).index_sha256


__all__ = ["Recorder", "index_sha256", "record"]
