"""Strict JSON for untrusted bytes: one parser for every JSON lazystore reads.

Rejects what Python's json module would otherwise let through: NaN and
Infinity, numbers that overflow to infinity (1e400), and, unless asked not
to, duplicate member names. Absurd nesting raises RecursionError inside the
C parser, never a crash; callers turn every failure into a FormatError
naming what they were reading.

It also bounds what a parse may cost (docs/format.md §11.6). Parsed JSON
takes far more memory than its text (tens of times, for lists of empty
lists or small objects: the figures are in docs/benchmarks.md, "Figures behind the code"), so
a large index could cost tens of GiB to open. The size of a text does not
bound that; the number of values in it does, with the text's bytes
bounding what strings cost. Both are checked before
anything is decoded or parsed, in one ``count`` per separator byte.
"""

from __future__ import annotations

import json

# The bounds (docs/format.md §11.6: MAX_METADATA_BYTES, MAX_METADATA_VALUES).
# What the worst texts just under them cost to parse, and how far below them
# real files are: docs/benchmarks.md, "Figures behind the code".
MAX_BYTES = 1 << 27  # 128 MiB
MAX_VALUES = 1 << 24  # 16,777,216 values, member names included

# Every value or member name but the first follows one of these bytes, so
# 1 + their count bounds the number of values. Counted anywhere, strings
# included: a cheap, exact rule that any reader and writer apply alike
# (telling strings apart would take a scan as costly as a parse).
_SEPARATORS = ",:[{"


class TooLarge(ValueError):
    """A text over the bounds: refused before it is parsed."""


def loads(text: str | bytes, *, unique_keys: bool = True):
    """Parse ``text``; ValueError (or RecursionError) for anything not strict
    JSON, :class:`TooLarge` (a ValueError) for a text over the bounds."""
    problem = size_problem(text)
    if problem is not None:
        raise TooLarge(problem)
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(
        text,
        parse_constant=_reject_constant,
        parse_float=_finite_float,
        object_pairs_hook=_no_duplicates if unique_keys else None,
    )


def size_problem(text: str | bytes) -> str | None:
    """Why ``text`` is over the bounds, or None. Writers check what they
    write with it, so that no reader refuses it."""
    if len(text) > MAX_BYTES:
        return (f"{len(text)} bytes of JSON, more than the {MAX_BYTES} lazystore parses "
                "(docs/format.md §11.6)")
    values = values_at_most(text)
    if values > MAX_VALUES:
        return (f"up to {values} JSON values (1 + its ',' ':' '[' '{{'), more than the {MAX_VALUES} JSON values "
                "lazystore parses (a bound on the memory a parse takes: docs/format.md §11.6)")
    return None


def values_at_most(text: str | bytes) -> int:
    """1 + the separator bytes in ``text``: at least its number of values, names included."""
    if isinstance(text, bytes):
        return 1 + sum(text.count(sep) for sep in _SEPARATORS.encode())  # each byte, as an int
    return 1 + sum(text.count(sep) for sep in _SEPARATORS)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} overflows a float")
    return value


def _no_duplicates(pairs: list) -> dict:
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"duplicate key {k!r}")
            seen.add(k)
    return d
