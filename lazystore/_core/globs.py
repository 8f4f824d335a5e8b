"""Selecting tensor names by a glob pattern, one way everywhere.

``keys="layers.7.*"`` means what :func:`fnmatch.fnmatchcase` means: case
sensitive on every platform, ``*`` crossing dots and slashes alike. The
pattern is compiled once per call rather than looked up in fnmatch's cache
for every name: a checkpoint may hold 100,000 names.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable


def matching(names: Iterable[str], pattern: str) -> list[str]:
    """The ``names`` the glob ``pattern`` matches, in their order."""
    match = re.compile(fnmatch.translate(pattern)).match
    return [n for n in names if match(n)]
