"""xxh3-64 checksums, kept apart from compression.

Every stored chunk, the index, and (by being required to be zero) every
padding byte is covered, so any single flipped byte is detected.
"""

from __future__ import annotations

import numpy as np
import xxhash

from lazystore.errors import ChecksumError

# Up to this size a copy is cheaper than numpy's per-call cost; padding
# (alignment at most 64 bytes by default) always is.
SMALL_BYTES = 4096


def digest(data) -> int:
    """xxh3-64 (seed 0) of a bytes-like object, as an unsigned int."""
    return xxhash.xxh3_64_intdigest(data)


def hasher():
    """An incremental xxh3-64 (seed 0): ``update(data)`` piece by piece, then
    ``intdigest()`` equals :func:`digest` of the pieces joined."""
    return xxhash.xxh3_64()


def check(data, expected: int, what: str) -> None:
    """Raise ChecksumError naming ``what`` unless ``data`` hashes to ``expected``."""
    actual = digest(data)
    if actual != expected:
        raise ChecksumError(what, expected, actual)


def all_zero(data) -> bool:
    """Are all bytes zero? (Padding must be, so it cannot hide data.)"""
    if len(data) <= SMALL_BYTES:
        return not bytes(data).strip(b"\0")
    return not np.frombuffer(data, dtype=np.uint8).any()
