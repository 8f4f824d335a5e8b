"""What a local save replaces: the file at its path, through symlinks, and
never anything that is not a plain file.

A save publishes by renaming its finished partial file over the target, and
``rename`` replaces whatever holds the name. Left at that, a save onto a
symlink would replace the link with a plain file (``open(path, "w")`` and
``torch.save`` write through it), and ``lazystore convert m.lzy /dev/null``
run as root would replace the device node with a plain file. So:

- :func:`resolve` follows a chain of symlinks to the file it names (which
  need not exist yet: a dangling link gets its target written, as
  ``open(path, "w")`` would). The partial file is made beside *that* file,
  so the rename stays within one folder, atomic, and the links are kept.
- Anything that exists there and is not a plain file (a folder, a device, a
  FIFO, a socket) is refused before anything is created: the path is left
  untouched.
- :func:`check_replaceable` looks again just before the rename, for a target
  swapped meanwhile. A node swapped in between that look and the rename
  itself (microseconds) is still replaced: no rename flag says "only over a
  plain file", and whoever can do that swap can write to the folder anyway.
  The partial file is never at risk from such games: it is created with
  ``O_CREAT | O_EXCL``, which never opens an existing file, device, FIFO or
  a symlink planted at its name (see :mod:`lazystore.sinks.partials`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lazystore._core.file_names import file_kind
from lazystore.errors import InvalidInputError

# Linux's MAXSYMLINKS: beyond this many links, open() fails with ELOOP too.
MAX_LINKS = 40



def resolve(path: Path) -> Path:
    """The file a save to ``path`` replaces: ``path``, or the end of the chain
    of symlinks starting there (which need not exist). Raises
    InvalidInputError if that exists and is not a plain file, or the links
    loop."""
    current = path
    for _ in range(MAX_LINKS + 1):
        st = _lstat(current)
        if st is None or not stat.S_ISLNK(st.st_mode):
            _refuse_unless_plain(current, st, path)
            return current
        # A relative link is relative to the folder holding it.
        current = current.parent / os.readlink(current)
    raise InvalidInputError(f"cannot save to {path}: more than {MAX_LINKS} symbolic links to follow (a loop?)")


def check_replaceable(target: Path) -> None:
    """Refuse to rename over ``target`` if it now exists and is not a plain
    file (it was swapped since :func:`resolve` looked)."""
    _refuse_unless_plain(target, _lstat(target), target)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _refuse_unless_plain(target: Path, st: os.stat_result | None, asked: Path) -> None:
    if st is None or stat.S_ISREG(st.st_mode):
        return
    kind = file_kind(st.st_mode)
    via = "" if target == asked else f" (where {asked} leads)"
    raise InvalidInputError(
        f"cannot save to {target}{via}: it is {kind}, not a plain file, and a save would replace it; "
        "save to a file path")
