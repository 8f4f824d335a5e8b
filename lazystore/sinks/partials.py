"""The temporary files writers fill beside their targets, and their clean-up.

A writer fills ``.<target name>.<12 hex>.partial`` in the target's folder and
renames it over the target when done. While it works it holds an exclusive
``flock`` on the file, so a partial file nobody holds a lock on was left by
a writer that died (killed, crashed, power lost) and can be removed. Readers
never look at partial files: they are hidden, and never the target's name.
"""

from __future__ import annotations

import fcntl
import os
import re
import uuid
from pathlib import Path

PARTIAL_SUFFIX = ".partial"
PARTIAL_NAME = re.compile(r"\.(?P<target>.+)\.[0-9a-f]{12}" + re.escape(PARTIAL_SUFFIX))


def create(target: Path):
    """Create and lock a new partial file for ``target``: (path, binary file)."""
    path = target.parent / f".{target.name}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}"
    file = open(path, "xb", buffering=1 << 20)
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        file.close()
        path.unlink(missing_ok=True)
        raise
    return path, file


def remove_stale(folder: Path, target_pattern: re.Pattern | None = None) -> list[Path]:
    """Delete the partial files in ``folder`` whose writers are gone (no lock
    held), optionally only those whose target matches ``target_pattern``.
    Returns what was removed; files it cannot inspect are left alone."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = PARTIAL_NAME.fullmatch(name)
        if not match or (target_pattern is not None and not target_pattern.fullmatch(match["target"])):
            continue
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone already, or not a plain file
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live writer holds it
        else:
            path.unlink(missing_ok=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed
