"""An encrypted file's index: its ``__lazystore_encryption__`` member, rules
S3 and S4 on open, and the key check of rule S6 (docs/format.md, "Sealed
(encrypted) chunks").

Names, dtypes, shapes and metadata are not encrypted: a file opens, lists
and describes its tensors without a key. Reading a sealed tensor needs the
key; given one, the key-check value and then the index MAC are checked
before any chunk is opened, so a chunk that opens is the one the writer
sealed at that place.
"""

from __future__ import annotations

import re

import numpy as np

from lazystore._core import aead
from lazystore._native import layout as fmt
from lazystore.codecs import SEALED_CODEC_IDS
from lazystore.errors import EncryptionKeyError, FormatError, UnsupportedVersionError

ENCRYPTION_KEY = aead.ENCRYPTION_KEY
_HEX = {"salt": 2 * aead.SALT_BYTES, "key_check": 2 * aead.KCV_BYTES, "index_mac": aead.MAC_HEX}


class SealedIndex:
    """What an encrypted file's index says of its encryption: the member
    (validated) and the index bytes its MAC covers."""

    __slots__ = ("index_bytes", "member")

    def __init__(self, member: dict, index_bytes: bytes):
        self.member = member
        self.index_bytes = index_bytes

    def opener(self, key: bytes, where: str) -> aead.Opener:
        """Rule S6 for ``key``: EncryptionKeyError for a key that does not
        open the file, DecryptionError for an index that was modified."""
        return aead.Opener(key, self.member, self.index_bytes, where)


def sealed_index(system_metadata: dict, entries: np.ndarray, minor: int | None, index_bytes) -> SealedIndex | None:
    """The encryption of a lazystore file's index (None: not encrypted),
    checked by rules S3 and S4: sealed codecs if and only if the member,
    in a file of format 1.4 or later, where every tensor with chunks is
    sealed."""
    found = system_metadata.get(ENCRYPTION_KEY)
    sealed = np.isin(entries["codec"], sorted(SEALED_CODEC_IDS))
    if found is None:
        if sealed.any():
            raise FormatError(f"sealed tensors (codec 128, 129 or 132) but no {ENCRYPTION_KEY} member (rule S3)")
        return None
    if minor is not None and minor < fmt.TRUST_MINOR:
        raise FormatError(f"a {ENCRYPTION_KEY} member in a format 1.{minor} file (it is format "
                          f"1.{fmt.TRUST_MINOR}; rule S3)")
    member = _checked_member(found)
    plain = ~sealed & (entries["chunk_count"] > 0)
    if plain.any():
        raise FormatError(f"an encrypted file with a tensor that is not sealed (entry {int(np.argmax(plain))}; "
                          "rule S4)")
    return SealedIndex(member, bytes(index_bytes))


def _checked_member(found) -> dict:
    if not isinstance(found, dict) or found.get("version") != 1:
        version = found.get("version") if isinstance(found, dict) else None
        if isinstance(version, int) and version > 1:
            raise UnsupportedVersionError(f"{ENCRYPTION_KEY} version {version} is newer than this lazystore "
                                          "reads (1); upgrade lazystore to read it")
        raise FormatError(f"corrupt {ENCRYPTION_KEY} member: not an object with version 1")
    if found.get("aead") != aead.AEAD_NAME or found.get("kdf") != aead.KDF_NAME:
        raise UnsupportedVersionError(f"{ENCRYPTION_KEY}: aead {found.get('aead')!r} and kdf {found.get('kdf')!r} "
                                      f"are not {aead.AEAD_NAME!r} and {aead.KDF_NAME!r}, which this lazystore reads")
    for field, length in _HEX.items():
        value = found.get(field)
        if not isinstance(value, str) or not re.fullmatch(f"[0-9a-f]{{{length}}}", value):
            raise FormatError(f"corrupt {ENCRYPTION_KEY} member: {field} is not {length} lowercase hex digits")
    return found


def opener_for(sealing: SealedIndex | None, key: bytes | None, where: str) -> aead.Opener | None:
    """The file's chunk opener for ``key`` (None: no key, or not encrypted):
    a key given for a file that is not encrypted is refused, because
    reading it would authenticate nothing the caller asked for."""
    if key is None:
        return None
    if sealing is None:
        raise EncryptionKeyError(f"{where} is not encrypted, but an encryption_key was given: it may have been "
                                 "replaced by a plaintext file (open it without encryption_key to read it anyway)")
    return sealing.opener(key, where)
