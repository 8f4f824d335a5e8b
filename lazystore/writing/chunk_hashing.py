"""What a writer hashes of each chunk: its xxh3 always and, in a file with
chunk digests (``digest="blake3"`` or ``"sha256"``, format 1.4,
docs/format.md §10.1), its cryptographic digest too.

Both are computed over the chunk's *stored* bytes by one pool task per
chunk, while the writer writes the window; a delta chunk's base is hashed
the same way (its xxh3 is the base checksum, its digest the base digest,
both of the *decoded* base chunk: rules B5 and G3).
"""

from __future__ import annotations

import numpy as np

from lazystore._core import crypto_digest
from lazystore._core.checksum import digest as xxh3
from lazystore._native import layout as fmt
from lazystore._native.chunk_digests import DIGEST_KEY, digest_member

_NO_DIGEST = bytes(crypto_digest.DIGEST_SIZE)  # a record's digest field where there is none


class ChunkHashing:
    """One writer's hashing: the task each chunk is hashed by, and the
    digests kept for its records (none without ``digest``)."""

    def __init__(self, algorithm: str | None):
        self.algorithm = algorithm
        self._digest = crypto_digest.hash_function(algorithm) if algorithm is not None else None
        # The pool task: a chunk's xxh3 alone, or (xxh3, digest).
        self.task = xxh3 if self._digest is None else self._both
        self._digests: list[bytes] = []
        self._base_digests: list[bytes] = []

    @property
    def minor(self) -> int:
        """The format minor its files are at least: 1.4 with digests, which
        a writer knows (and states in the preamble) from the start."""
        return fmt.TRUST_MINOR if self.algorithm is not None else fmt.BASE_MINOR

    def _both(self, blob) -> tuple[int, bytes]:
        assert self._digest is not None  # the task only where there is one
        return xxh3(blob), self._digest(blob)

    def keep(self, results: list) -> list[int]:
        """The chunk xxh3s of a window's task ``results``; their digests
        are kept for the records."""
        if self._digest is None:
            return results
        self._digests += [d for _, d in results]
        return [s for s, _ in results]

    def bases(self, results: list | None, count: int) -> list[int]:
        """The base xxh3s of a tensor's ``count`` chunks, from the task
        results of their decoded base chunks (None: no delta tensor, whose
        base fields are zero); their digests are kept for the records."""
        if results is None:
            self._base_digests += [_NO_DIGEST] * count if self._digest is not None else []
            return [0] * count
        if self._digest is None:
            return results
        self._base_digests += [d for _, d in results]
        return [s for s, _ in results]

    def records(self, plain: np.ndarray, deltas: bool) -> np.ndarray:
        """The chunk records: ``plain`` (xxh3 fields) as they are in a file
        without digests, widened with the digests (56 bytes, 88 with
        ``deltas``: a file with delta tensors) in a file with them."""
        if self._digest is None:
            return plain
        wide = np.zeros(len(plain), fmt.DELTA_DIGEST_CHUNK_DTYPE if deltas else fmt.DIGEST_CHUNK_DTYPE)
        for field in plain.dtype.names or ():
            wide[field] = plain[field]
        wide["digest"] = _rows(self._digests)
        if deltas:
            wide["base_digest"] = _rows(self._base_digests)
        return wide

    def with_member(self, system_metadata: dict) -> dict:
        """``system_metadata`` with this writer's ``__lazystore_digest__``
        member (none without digests): the member says what the records
        hold, so one carried from another file is dropped."""
        rest = {k: v for k, v in system_metadata.items() if k != DIGEST_KEY}
        return rest if self.algorithm is None else {**rest, DIGEST_KEY: digest_member(self.algorithm)}


def _rows(digests: list[bytes]) -> np.ndarray:
    return np.frombuffer(b"".join(digests), np.uint8).reshape(len(digests), crypto_digest.DIGEST_SIZE)
