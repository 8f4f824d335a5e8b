"""The rules a tensor name follows, one function per rule, so that every
writer and adapter refuses a bad name the same way, before anything is
written.

A lazystore file stores names NUL-terminated in UTF-8 (docs/format.md
§11.5): no NUL, and no lone surrogate (Python strings may hold one; UTF-8
cannot). A safetensors header is JSON read as UTF-8: a NUL is fine there
(JSON escapes it), a lone surrogate is not.
"""

from __future__ import annotations

from collections.abc import Container

from lazystore.errors import InvalidInputError


def require_str(name, what: str = "tensor names") -> str:
    """``name``, if it is a str."""
    if not isinstance(name, str):
        raise InvalidInputError(f"{what} must be str, got {type(name).__name__}: {name!r}")
    return name


def require_no_nul(name: str, what: str = "tensor name") -> None:
    if "\0" in name:
        raise InvalidInputError(f"{what} {name!r} contains a NUL character")


def require_utf8(name: str, what: str = "tensor name", where: str = "") -> None:
    """``where``: the place the name was found, said after it (" at state/0")."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"{what} {name!r}{where} cannot be encoded as UTF-8") from None


def require_new(name: str, seen: Container[str]) -> None:
    if name in seen:
        raise InvalidInputError(f"duplicate tensor name {name!r}")
