"""Opening the checkpoints a command reads, and reading their tensors.

Every command opens its inputs here, so each reads the same formats:
whatever :func:`lazystore.open` reads, plus torch zips and ``.npz``
archives. :class:`Tensors` gathers tensors from several open checkpoints
for ``convert`` and ``merge`` to copy, naming the right file in any error.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import lazystore as ls
from lazystore.cli.errors import about

# Archives are not re-exported by lazystore.interop: no public function tells
# an archive from a checkpoint, or opens one as a view, yet.
from lazystore.interop import archives


def open_input(path, *, verify: bool = False, stream: bool = False) -> ls.CheckpointView:
    """Open any checkpoint :func:`lazystore.open` reads (lazystore, safetensors,
    sharded folders), or a torch zip / ``.npz`` archive (read through
    ``torch.load(weights_only=True)`` / ``allow_pickle=False`` only).

    Commands that copy or compare data pass ``verify=True``: raw tensors are
    checked against their checksums as they are read, so corrupt bytes stop
    the command instead of being copied into a new file (with fresh checksums)
    or reported as a value difference.

    Commands that read every byte once (verify, convert, merge, diff) pass
    ``stream=True``: a local file is read without a mapping, so the pages
    read do not stay resident and memory stays bounded for a checkpoint
    larger than memory."""
    with about(path):
        if archives.archive_format(path) is not None:
            return archives.open_archive(path)
        return ls.open(path, verify=verify, mmap=not stream)


class Tensors:
    """Tensors gathered from open checkpoints, name -> (path, view), in the
    order given: what :func:`lazystore.interop.copy` needs of a view
    (iteration, ``info``, ``[name]``).

    Reads happen inside copy, whose errors the command attributes to the
    output being written; reading here names the input instead, so a corrupt
    source is reported as such."""

    def __init__(self, sources: Mapping[str, tuple[str, ls.CheckpointView]]):
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
