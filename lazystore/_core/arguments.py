"""Checking a caller's arguments, one way everywhere: a bad argument raises
:class:`~lazystore.errors.InvalidInputError` naming it, before any file is
touched.

Left to themselves, bad arguments fail deep inside: ``dict("oops")`` raises
a bare ValueError, ``16 <= "1"`` a TypeError, zstandard a ValueError for
level 40, and only after the first tensor was encoded. Callers could not
tell those from lazystore's bugs. InvalidInputError is a ValueError, so
``except ValueError`` clauses written against the old errors still work.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Mapping

from lazystore.errors import InvalidInputError


def integer(name: str, value, low: int, high: int | None = None) -> int:
    """``value`` as an int from ``low`` to ``high`` (inclusive; no upper
    bound when None). Python and numpy integers pass; bools, floats and
    strings are refused (``True`` for a size is a mistake, not 1)."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidInputError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if number < low or (high is not None and number > high):
        bounds = f"at least {low}" if high is None else f"between {low} and {high}"
        raise InvalidInputError(f"{name} must be {bounds}, got {number}")
    return number


def json_object(name: str, value) -> dict:
    """A copy of ``value``, a mapping (None: empty), as a dict. Its keys and
    values are the writer's to check: this only refuses what is not a
    mapping at all (a str, a list of pairs)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{name} must be a dict of str to JSON values, got {type(value).__name__} "
                                f"{_short(value)}")
    return dict(value)


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def known_options(options: Mapping, accepted, *, others=()) -> None:
    """Refuse keyword options (a ``**options`` catch-all) outside
    ``accepted``, naming each with the keyword it was probably meant to be
    and listing the function's keywords: ``others`` are the ones its
    signature spells out, which a typo of can still land in ``options``
    (``compresion=`` for ``compression=``). Python's own TypeError would
    name only the inner call, or nothing, where a writer swallowed it."""
    unknown = [name for name in options if name not in accepted]
    if not unknown:
        return
    keywords = [*others, *accepted]
    named = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), keywords, n=1)
        named.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise InvalidInputError(f"unknown option{'s' if len(named) > 1 else ''} {', '.join(named)}; "
                            f"the keywords are {', '.join(keywords)}")
