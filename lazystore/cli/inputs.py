"""Opening the checkpoints a command reads.

Every command opens its inputs here, so each reads the same formats:
whatever :func:`lazystore.open` reads, plus the archives that only
``convert`` and ``merge`` can take as a source (torch zips, ``.npz``).
"""

from __future__ import annotations

import lazystore as ls
from lazystore.cli.errors import about

# Archives are not re-exported by lazystore.interop: no public function tells
# an archive from a checkpoint, or opens one as a view, yet.
from lazystore.interop import archives


def open_input(path, *, verify: bool = False) -> ls.CheckpointView:
    """Open any checkpoint :func:`lazystore.open` reads (lazystore, safetensors,
    sharded folders), or a torch zip / ``.npz`` archive (read through
    ``torch.load(weights_only=True)`` / ``allow_pickle=False`` only).

    Commands that copy or compare data pass ``verify=True``: raw tensors are
    checked against their checksums as they are read, so corrupt bytes stop
    the command instead of being copied into a new file (with fresh checksums)
    or reported as a value difference."""
    with about(path):
        if archives.archive_format(path) is not None:
            return archives.open_archive(path)
        return ls.open(path, verify=verify)
