"""Chunk digests in a file (format 1.4, docs/format.md §9.5): the member
that declares them, rule G1 on open, and the checks of a verified read
(G2: a chunk's stored bytes; G3: the decoded base chunk of a codec-3 chunk).

A file with digests says so in the reserved metadata member::

    "__lazystore_digest__": {"version": 1, "algorithm": "blake3"}

and its chunk records are 56 bytes (88 with codec-3 tensors), the digests
at fixed offsets 24 and 56. An older reader skips those fields and checks
xxh3 as before; this one checks the digest instead of xxh3 whenever it is
asked to verify (``verify=True``, ``load``'s default, ``verify()``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from lazystore._core import crypto_digest
from lazystore._native import layout as fmt
from lazystore.errors import DigestError, FormatError, UnsupportedVersionError

DIGEST_KEY = "__lazystore_digest__"
DIGEST_VERSION = 1


def digest_member(algorithm: str) -> dict:
    """The member's value for a file whose chunks are hashed with ``algorithm``."""
    return {"version": DIGEST_VERSION, "algorithm": algorithm}


class ChunkDigests:
    """A file's chunk digests: one 32-byte row per chunk record (and the
    base digest rows in a file with codec-3 tensors), and what checks them.

    ``unsupported`` says why this lazystore cannot check them (an algorithm
    or member version of a newer format): the file still reads, and only a
    read asked to verify raises UnsupportedVersionError."""

    def __init__(self, algorithm, rows: np.ndarray | None, base_rows: np.ndarray | None, minor: int,
                 unsupported: str | None = None):
        self.algorithm = algorithm
        self.rows = rows
        self.base_rows = base_rows
        self.minor = minor
        self.unsupported = unsupported

    def function(self) -> crypto_digest.HashFunction:
        """The algorithm's hash function: UnsupportedVersionError when this
        lazystore does not implement it, MissingDependencyError when its
        package is not installed."""
        if self.unsupported is not None:
            raise UnsupportedVersionError(
                f"cannot check the chunk digests of this format {fmt.FORMAT_MAJOR}.{self.minor} file: "
                f"{self.unsupported}; upgrade lazystore to verify it (it still reads without verification)")
        return crypto_digest.hash_function(self.algorithm)

    def check(self, data, g: int, what: str) -> None:
        """Rule G2: DigestError naming ``what`` unless ``data`` (chunk record
        ``g``'s stored bytes) hash to its digest."""
        actual = self.function()(data)
        assert self.rows is not None  # rule G1: digests this lazystore checks come with the records
        expected = self.rows[g].tobytes()
        if actual != expected:
            raise DigestError(what, expected, actual, self.algorithm)

    def first_mismatch(self, blobs: Iterable, ids: np.ndarray) -> int | None:
        """The place in ``ids`` (chunk record numbers) of the first chunk
        whose stored bytes (``blobs``, in the same order) fail rule G2, or None."""
        actual = b"".join(map(self.function(), blobs))
        assert self.rows is not None
        size, expected = crypto_digest.DIGEST_SIZE, self.rows[ids].tobytes()
        if actual == expected:
            return None
        return next(i for i in range(len(ids))
                    if actual[i * size : (i + 1) * size] != expected[i * size : (i + 1) * size])

    def base_mismatch(self, base_bytes, g: int) -> tuple[bytes, bytes] | None:
        """Rule G3: ``(expected, actual)`` digests when ``base_bytes``, the
        decoded base chunk of codec-3 chunk record ``g``, are not the
        content it was coded against; None when they are."""
        actual = self.function()(base_bytes)
        assert self.base_rows is not None  # rule G1: codec 3 needs the wide records
        expected = self.base_rows[g].tobytes()
        return None if actual == expected else (expected, actual)


def declared(system_metadata: dict, raw: fmt.RawIndex, minor: int | None) -> ChunkDigests | None:
    """The file's chunk digests, when its member declares them, checked by
    rule G1 (FormatError); None for a file without (or a foreign file,
    whose ``minor`` is None: only lazystore's own files hold digests)."""
    value = system_metadata.get(DIGEST_KEY)
    if value is None or minor is None:
        return None

    def bad(why: str) -> FormatError:
        return FormatError(f"corrupt index: {DIGEST_KEY} {why} (rule G1)")

    if not isinstance(value, dict):
        raise bad("is not a JSON object")
    if minor < fmt.TRUST_MINOR:
        raise bad(f"in a format {fmt.FORMAT_MAJOR}.{minor} file (chunk digests are format "
                  f"{fmt.FORMAT_MAJOR}.{fmt.TRUST_MINOR})")
    version, algorithm = value.get("version"), value.get("algorithm")
    if type(version) is not int or (version != DIGEST_VERSION and minor <= fmt.FORMAT_MINOR):
        raise bad(f"has version {version!r}, not {DIGEST_VERSION}")
    if version != DIGEST_VERSION:
        # A newer format's member: what its records hold is not known here.
        return ChunkDigests(algorithm, None, None, minor, f"its {DIGEST_KEY} is version {version}")
    if not isinstance(algorithm, str):
        raise bad(f"names no algorithm (\"algorithm\": {algorithm!r})")
    if raw.digests is None:
        raise bad(f"is present but the chunk records are narrower than {fmt.DIGEST_CHUNK_DTYPE.itemsize} bytes: "
                  "they hold no digests")
    unsupported = None if crypto_digest.known(algorithm) else \
        f"its chunks are hashed with {algorithm!r}, which this lazystore does not implement"
    return ChunkDigests(algorithm, raw.digests, raw.base_digests, minor, unsupported)
