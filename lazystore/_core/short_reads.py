"""The one check behind every fixed-size read of untrusted bytes."""

from __future__ import annotations

from lazystore.errors import FormatError


def need(buf, n: int, what: str) -> None:
    """Raise FormatError unless ``buf`` holds ``n`` bytes, saying what was
    being read, how many bytes were expected and how many came:
    "EOF: reading trailer, expected 40 bytes, got 12"."""
    if len(buf) < n:
        raise FormatError(f"EOF: reading {what}, expected {n} bytes, got {len(buf)}")
