"""Opening the checkpoints a command reads, and reading their tensors.

Every command opens its inputs here, so each reads the same formats:
whatever :func:`lazystore.open` reads, plus torch zips and ``.npz``
archives. :class:`Tensors` gathers tensors from several open checkpoints
for ``convert`` and ``merge`` to copy, naming the right file in any error.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping

import lazystore as ls
from lazystore.cli.errors import CliError, about

# Archives are not re-exported by lazystore.interop: no public function tells
# an archive from a checkpoint, or opens one as a view, yet.
from lazystore.interop import archives, open_verified


def open_input(path, *, verify: bool = False, stream: bool = False, encryption_key: bytes | None = None) -> ls.ViewBase:
    """Open any checkpoint :func:`lazystore.open` reads (lazystore, safetensors,
    sharded folders), or a torch zip / ``.npz`` archive (read through
    ``torch.load(weights_only=True)`` / ``allow_pickle=False`` only).

    Commands that copy or compare data pass ``verify=True``: raw tensors are
    checked against the checksums the file records as they are read
    (:func:`~lazystore.interop.open_verified`), so corrupt bytes stop
    the command instead of being copied into a new file (with fresh checksums)
    or reported as a value difference.

    Commands that read every byte once (verify, convert, merge, diff) pass
    ``stream=True``: a local file is read without a mapping, so the pages
    read do not stay resident and memory stays bounded for a checkpoint
    larger than memory.

    ``encryption_key`` opens an encrypted checkpoint (see ``ls.open``)."""
    _refuse_streams(path)
    with about(path):
        if archives.archive_format(path) is not None:
            return archives.open_archive(path)
        if verify:
            return open_verified(path, mmap=not stream, encryption_key=encryption_key)
        return ls.open(path, mmap=not stream, encryption_key=encryption_key)


def is_encrypted(path) -> bool:
    """Does the checkpoint at ``path`` hold sealed (encrypted) tensors?
    Read from its index alone, which needs no key."""
    _refuse_streams(path)
    with about(path):
        if archives.archive_format(path) is not None:
            return False
        with ls.open(path) as ck:
            return any((ck.info(n).compression or "").startswith("sealed") for n in ck)


# The metadata files that mark a DCP checkpoint folder: lazystore.dcp's
# LazyStoreWriter's and torch's FileSystemWriter's (named here so that the
# command does not import torch, as lazystore.dcp does, for other input).
DCP_METADATA_FILES = ("metadata.lzy", ".metadata")


def dcp_folder(path) -> bool:
    """Is ``path`` a local folder holding a DCP checkpoint (lazystore's or torch's)?"""
    try:
        return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, f)) for f in DCP_METADATA_FILES)
    except (TypeError, ValueError):
        return False


# A checkpoint is read out of order (its index is at the end, tensors are
# read by offset), so it must be a file that can be read anywhere: a pipe
# can only be read once, front to back.
_NOT_SEEKABLE = "a checkpoint is read out of order, so it must be a file; save the stream to a file first"


def _refuse_streams(path) -> None:
    """Refuse ``-`` and pipes, FIFOs, sockets and devices (``/dev/stdin``
    when it is a pipe) with a line that says why, before the library meets
    them ("Invalid argument" from mapping a pipe, or a hang on a FIFO)."""
    if os.fspath(path) == "-":
        raise CliError(f"-: reading standard input is not supported: {_NOT_SEEKABLE}")
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError, TypeError):
        return  # a URL, a missing file: opening it says what is wrong
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise CliError(f"{path}: not a regular file (a pipe or a device): {_NOT_SEEKABLE}")


class Tensors:
    """Tensors gathered from open checkpoints, name -> (path, view), in the
    order given: what :func:`lazystore.interop.copy` needs of a view
    (iteration, ``info``, ``[name]``).

    Reads happen inside copy, whose errors the command attributes to the
    output being written; reading here names the input instead, so a corrupt
    source is reported as such."""

    def __init__(self, sources: Mapping[str, tuple[str, ls.ViewBase]]):
        self._sources = sources

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources)

    def __len__(self) -> int:
        return len(self._sources)

    def info(self, name: str) -> ls.TensorInfo:
        path, view = self._sources[name]
        with about(path):
            return view.info(name)

    def __getitem__(self, name: str):
        path, view = self._sources[name]
        with about(path):
            return view[name]

    def get_slice(self, name: str):
        path, view = self._sources[name]
        return _Named(path, view.get_slice(name))


class _Named:
    """A tensor slice whose reads name the file they come from."""

    def __init__(self, path, part):
        self._path = path
        self._part = part

    def __getitem__(self, index):
        with about(self._path):
            return self._part[index]
