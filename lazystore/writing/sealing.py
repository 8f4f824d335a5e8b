"""What a Writer with ``encryption_key=`` does beyond any other (format 1.4,
docs/format.md "Sealed (encrypted) chunks"): each chunk is sealed after its
final encoding (raw or zstd, decided on the first window) and before it is
hashed, so xxh3 and digests cover the stored ciphertext; the
``__lazystore_encryption__`` member is the index's last metadata member,
its MAC patched in once the index is complete (rule S5), before the
trailer's checksum of the index is computed.
"""

from __future__ import annotations

from lazystore._core.aead import ENCRYPTION_KEY, Sealer, resolve_key
from lazystore.errors import InvalidInputError


def sealer_for(encryption_key, salt, base) -> Sealer | None:
    """The file's sealer (None without a key); the key is resolved (a
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
    return Sealer(key, salt)


def seal_window(sealer: Sealer, stored: list, name: str, first: int, first_global: int) -> list:
    """A window's encoded chunks, sealed: chunk ``first`` of the tensor (the
    file's ``first_global``) and on."""
    return [sealer.seal(chunk, name, first + i, first_global + i) for i, chunk in enumerate(stored)]


def with_member(system_metadata: dict, sealer: Sealer) -> dict:
    """``system_metadata`` with the encryption member last (its index_mac
    zeros until :meth:`Sealer.patch`); any such member it held (carried
    from another file) is dropped."""
    rest = {k: v for k, v in system_metadata.items() if k != ENCRYPTION_KEY}
    return {**rest, ENCRYPTION_KEY: sealer.member()}
