"""Names of files that a file or index names beside itself."""

from __future__ import annotations

import os
import stat


def is_plain_file_name(f) -> bool:
    """Could ``f`` name a file directly inside the folder? The name comes
    from untrusted bytes (a sharded folder's index, a delta file's base): a
    name that escapes the folder, holds a NUL, cannot be encoded for the
    file system or is longer than a file name can be (which makes ``stat``
    raise OSError, not report a missing file) is corrupt."""
    if not isinstance(f, str) or not f or os.path.basename(f) != f or f in (".", "..") or "\0" in f:
        return False
    try:
        return len(os.fsencode(f)) <= 255  # NAME_MAX of Linux and macOS file systems
    except UnicodeError:  # e.g. a lone surrogate from a JSON escape
        return False


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What a file of ``mode`` that is no regular file is, in words: for
    the errors of reading or saving onto one."""
    return next((name for test, name in _KINDS if test(mode)), f"a special file (mode {stat.S_IFMT(mode):o})")
