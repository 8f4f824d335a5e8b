"""What a Writer with ``encryption_key=`` does beyond any other (format 1.4,
docs/format.md "Sealed (encrypted) chunks"): each chunk is sealed after its
final encoding (raw or zstd, decided on the first window) and before it is
hashed, so xxh3 and digests cover the stored ciphertext; the
``__lazystore_encryption__`` member is the index's last metadata member,
its MAC patched in once the index is complete (rule S5), before the
trailer's checksum of the index is computed.
"""

from __future__ import annotations

import numpy as np

from lazystore._core.aead import ENCRYPTION_KEY, TAG_BYTES, Sealer, resolve_key
from lazystore.errors import InvalidInputError
from lazystore.sinks.base import byte_view


def sealing_for(encryption_key, salt, base) -> FileSealing | None:
    """The file's sealing (None without a key); the key is resolved (a
    callable called) once, here. A delta file cannot be encrypted: its
    records would hold checksums of the base's plaintext, which anyone
    could test guesses against."""
    key = resolve_key(encryption_key)
    if key is None:
        if salt is not None:
            raise InvalidInputError("_salt is for encrypted files only")
        return None
    if base is not None:
        raise InvalidInputError("an encrypted file cannot be a delta (base=): sealed deltas are not supported")
    return FileSealing(Sealer(key, salt))


class FileSealing:
    """A Writer's encryption: chunks sealed a window at a time, the member,
    the index's MAC.

    A window is sealed into one buffer, reused from window to window: a
    fresh buffer per chunk costs more (zeroing, page faults) than AES-GCM
    itself. A window's sealed chunks are valid until the next window is
    sealed; the writer has written and hashed them by then (a sink's
    ``write_many`` writes or copies what it is given before it returns)."""

    def __init__(self, sealer: Sealer):
        self.sealer = sealer
        self._buffer = np.empty(0, np.uint8)

    def seal(self, stored: list, name: str, first: int, first_global: int) -> list:
        """A window's encoded chunks, sealed: chunk ``first`` of the tensor
        (the file's ``first_global``) and on."""
        sizes = [len(byte_view(chunk)) + TAG_BYTES for chunk in stored]
        if len(self._buffer) < sum(sizes):
            self._buffer = np.empty(sum(sizes), np.uint8)
        sealed, at = [], 0
        for i, (chunk, size) in enumerate(zip(stored, sizes)):
            out = self._buffer[at : at + size]
            self.sealer.seal_into(chunk, out, name, first + i, first_global + i)
            sealed.append(out)
            at += size
        return sealed

    def with_member(self, system_metadata: dict) -> dict:
        """``system_metadata`` with the encryption member last (its index_mac
        zeros until :meth:`patch`); any such member it held (carried from
        another file) is dropped."""
        rest = {k: v for k, v in system_metadata.items() if k != ENCRYPTION_KEY}
        return {**rest, ENCRYPTION_KEY: self.sealer.member()}

    def patch(self, index: bytes) -> bytes:
        """The complete index with its MAC patched in (rule S5)."""
        self._buffer = np.empty(0, np.uint8)  # the last window is written: free it
        return self.sealer.patch(index)
