"""Selecting tensor names by a glob pattern, one way everywhere.

``keys="layers.7.*"`` means what :func:`fnmatch.fnmatchcase` means: case
sensitive on every platform, ``*`` crossing dots and slashes alike. The
pattern is compiled once per call rather than looked up in fnmatch's cache
for every name: a checkpoint may hold 100,000 names.

A pattern that matches nothing raises TensorNotFoundError, as an unknown
exact name does: a typo in ``keys="layer.*"`` (for "layers.*") must not load
an empty dict that the caller then takes for a checkpoint with nothing in
it. Every glob selection goes through :func:`matching` (``select``,
``load(keys=)``, ``lazystore.torch.load_file(keys=)``, ``lazystore ls``).
An empty list of names is not a pattern: it asks for nothing and gets it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

from lazystore.errors import TensorNotFoundError

# Which tensors a call selects: a glob pattern (a str, as :func:`matching`
# reads it) or exact names (any other iterable of str). ``keys=`` and
# ``select`` take it everywhere; ``None`` (all of them) is added where allowed.
Names = str | Iterable[str]


def matching(names: Iterable[str], pattern: str, where: str = "the checkpoint") -> list[str]:
    """The ``names`` the glob ``pattern`` matches, in their order; raises
    TensorNotFoundError naming ``where`` when it matches none."""
    match = re.compile(fnmatch.translate(pattern)).match
    found = [n for n in names if match(n)]
    if not found:
        raise TensorNotFoundError(f"no tensor matches the glob {pattern!r} in {where}")
    return found
