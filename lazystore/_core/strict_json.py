"""Strict JSON for untrusted bytes: one parser for every JSON lazystore reads.

Rejects what Python's json module would otherwise let through: NaN and
Infinity, numbers that overflow to infinity (1e400), and, unless asked not
to, duplicate member names. Absurd nesting raises RecursionError inside the
C parser, never a crash; callers turn every failure into a FormatError
naming what they were reading.
"""

from __future__ import annotations

import json


def loads(text: str | bytes, *, unique_keys: bool = True):
    """Parse ``text``; ValueError (or RecursionError) for anything not strict JSON."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(
        text,
        parse_constant=_reject_constant,
        parse_float=_finite_float,
        object_pairs_hook=_no_duplicates if unique_keys else None,
    )


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
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r}")
    return d
