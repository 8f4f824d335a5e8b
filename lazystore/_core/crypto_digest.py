"""Cryptographic chunk digests (format 1.4, docs/format.md §9.5): the
algorithms a file may name, by name, each a function of a bytes-like object
giving its 32-byte digest.

xxh3 catches accidents; someone who changes a chunk can recompute its
xxh3. A collision-resistant digest per chunk, under a trust anchor over the
index (a signature, a pinned index hash), makes every chunk tamper-evident.

BLAKE3 comes from the optional ``blake3`` package, imported only when a
BLAKE3 digest is first needed; SHA-256 is the standard library's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from lazystore._core.distribution import install_hint
from lazystore.errors import InvalidInputError, MissingDependencyError

DIGEST_SIZE = 32  # every algorithm's output, the width of a record's digest field
BLAKE3, SHA256 = "blake3", "sha256"
ALGORITHMS = (BLAKE3, SHA256)  # what a file may name, and what digest= accepts
CRYPTO_EXTRA = install_hint("crypto", "blake3")

HashFunction = Callable[[object], bytes]


def _sha256(data) -> bytes:
    return hashlib.sha256(data).digest()


def _blake3() -> HashFunction:
    try:
        from blake3 import blake3
    except ImportError as exc:
        raise MissingDependencyError(f"BLAKE3 chunk digests need the blake3 package: {CRYPTO_EXTRA}") from exc

    def blake3_digest(data) -> bytes:
        # The default 32-byte unkeyed output, on one thread: the caller
        # already hashes chunks in parallel on its pool.
        return blake3(data).digest()

    return blake3_digest


_FACTORIES: dict[str, Callable[[], HashFunction]] = {BLAKE3: _blake3, SHA256: lambda: _sha256}
_made: dict[str, HashFunction] = {}


def known(name: str) -> bool:
    """Is ``name`` an algorithm this lazystore implements?"""
    return name in _FACTORIES


def hash_function(name: str) -> HashFunction:
    """The function giving ``name``'s 32-byte digest of a bytes-like
    object. MissingDependencyError when its package is not installed;
    KeyError for a name this lazystore does not know (see :func:`known`)."""
    found = _made.get(name)
    if found is None:
        found = _made[name] = _FACTORIES[name]()
    return found


def writer_digest(digest) -> str | None:
    """A save's ``digest=`` argument, checked: None, or the name of an
    algorithm whose function is at hand (MissingDependencyError now, not
    after writing gigabytes, when its package is missing)."""
    if digest is None:
        return None
    if not isinstance(digest, str) or not known(digest.lower()):
        raise InvalidInputError(f"digest must be None, {BLAKE3!r} or {SHA256!r}, got {digest!r}")
    name = digest.lower()
    hash_function(name)
    return name
