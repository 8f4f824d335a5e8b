"""Authenticated encryption of chunks: AES-256-GCM under a per-file key
(docs/format.md, "Sealed (encrypted) chunks", rules S1-S6).

The user's 32-byte key never touches a chunk. Each file has a random
32-byte salt, and HKDF-SHA256(user key, salt) derives three values: the
chunk key, the index MAC key and a key-check value, so a fresh salt on
every save means no two files share a chunk key.

A chunk's nonce is its global number in the file (its chunk record's
index), which is unique under the file's key and never stored; its
associated data is the tensor's name and the chunk's number in it. A chunk
moved to another place, or to another tensor, fails its tag. The index is
authenticated by an HMAC (rule S5), which covers names, shapes, codecs and
every checksum: with it, a tag that passes means the chunk is the one the
writer sealed there.

``cryptography`` is imported when a key is first used: without it, saving
or opening with a key raises MissingDependencyError.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from typing import NamedTuple

from lazystore._core.distribution import install_hint
from lazystore.errors import DecryptionError, EncryptionKeyError, InvalidInputError, MissingDependencyError

KEY_BYTES = 32
SALT_BYTES = 32
TAG_BYTES = 16  # AES-GCM's tag, after the ciphertext: a sealed chunk is this much longer
KCV_BYTES = 16
MAC_HEX = 64  # the index MAC, as lowercase hex in the member
# HKDF's info strings: one derived value each (part of the format).
CHUNK_INFO = b"lazystore 1.4 aes-256-gcm"
MAC_INFO = b"lazystore 1.4 index mac"
KCV_INFO = b"lazystore 1.4 key check"
# The reserved metadata member of an encrypted file, written last so that
# the index ends with ``"index_mac":"<64 hex>"}}`` (rule S5).
ENCRYPTION_KEY = "__lazystore_encryption__"
MAC_FIELD = b'"index_mac":"'
INDEX_END = b'"}}'
AEAD_NAME = "aes-256-gcm"
KDF_NAME = "hkdf-sha256"
_NONCE_PAD = bytes(4)
_U64 = struct.Struct("<Q")
INSTALL_HINT = install_hint("crypto", "cryptography")


def _aesgcm():
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise MissingDependencyError(f"encryption (encryption_key=) needs cryptography: {INSTALL_HINT}") from exc
    return AESGCM


def resolve_key(key) -> bytes | None:
    """An ``encryption_key=`` argument as 32 bytes (None stays None): bytes,
    or a zero-argument callable returning them (a KMS call), called here,
    once per open or save."""
    if key is None:
        return None
    if callable(key):
        key = key()
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"encryption_key must be {KEY_BYTES} bytes or a callable returning them, "
                                f"got {type(key).__name__}")
    key = bytes(key)
    if len(key) != KEY_BYTES:
        raise InvalidInputError(f"encryption_key must be {KEY_BYTES} bytes, got {len(key)}")
    return key


def derive(key: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    """HKDF-SHA256 (RFC 5869) of ``key`` with ``salt`` and ``info``, written
    out with hmac: ``length`` is at most 32, so one expand block."""
    prk = hmac.new(salt, key, hashlib.sha256).digest()
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()[:length]


def nonce(g: int) -> bytes:
    """The nonce of the file's chunk ``g`` (its global number)."""
    return _NONCE_PAD + _U64.pack(g)


def aad(name: str, c: int) -> bytes:
    """The associated data of chunk ``c`` of tensor ``name``."""
    return name.encode("utf-8") + b"\0" + _U64.pack(c)


def mac_input(index) -> bytes:
    """The index bytes with the MAC's 64 hex digits replaced by 64 ASCII
    zeros (rule S5); DecryptionError unless the index ends as rule S5 says."""
    index = bytes(index)
    start = len(index) - len(INDEX_END) - MAC_HEX
    if start < len(MAC_FIELD) or index[start - len(MAC_FIELD) : start] != MAC_FIELD \
            or not index.endswith(INDEX_END):
        raise DecryptionError("index: it does not end with the encryption member's index_mac (rule S5)")
    return index[:start] + b"0" * MAC_HEX + index[-len(INDEX_END):]


class FileKeys(NamedTuple):
    """What a file's salt and the user's key derive (see the module's docstring)."""

    chunk: bytes
    mac: bytes
    check: bytes

    @classmethod
    def of(cls, key: bytes, salt: bytes) -> FileKeys:
        return cls(derive(key, salt, CHUNK_INFO, KEY_BYTES), derive(key, salt, MAC_INFO, KEY_BYTES),
                   derive(key, salt, KCV_INFO, KCV_BYTES))

    def index_mac(self, index) -> str:
        """The MAC of the index bytes (rule S5), as the member's hex."""
        return hmac.new(self.mac, mac_input(index), hashlib.sha256).hexdigest()


class Sealer:
    """One file's encryption at save time: its salt and keys, the member
    it records, and sealing of chunks."""

    def __init__(self, key: bytes, salt: bytes | None = None):
        self.salt = os.urandom(SALT_BYTES) if salt is None else bytes(salt)
        if len(self.salt) != SALT_BYTES:
            raise InvalidInputError(f"the salt must be {SALT_BYTES} bytes")
        self.keys = FileKeys.of(key, self.salt)
        self._aead = _aesgcm()(self.keys.chunk)

    def member(self) -> dict:
        """The metadata member, its index_mac zeros until :meth:`patch`."""
        return {"version": 1, "aead": AEAD_NAME, "kdf": KDF_NAME, "salt": self.salt.hex(),
                "key_check": self.keys.check.hex(), "index_mac": "0" * MAC_HEX}

    def seal(self, chunk, name: str, c: int, g: int) -> bytearray:
        """Chunk ``c`` of ``name`` (the file's chunk ``g``), sealed: its
        ciphertext, then the tag."""
        out = bytearray(len(memoryview(chunk).cast("B")) + TAG_BYTES)
        self.seal_into(chunk, out, name, c, g)
        return out

    def seal_into(self, chunk, out, name: str, c: int, g: int) -> None:
        """:meth:`seal` into ``out``, exactly the chunk's length plus the tag."""
        self._aead.encrypt_into(nonce(g), chunk, aad(name, c), out)

    def patch(self, index: bytes) -> bytes:
        """The index with its MAC patched in (same length)."""
        mac = self.keys.index_mac(index).encode("ascii")
        return index[: -len(INDEX_END) - MAC_HEX] + mac + index[-len(INDEX_END):]


class Opener:
    """One encrypted file's keys at read time, checked against its member
    and index (rule S6) before any chunk is opened."""

    def __init__(self, key: bytes, member: dict, index_bytes, where: str):
        salt = bytes.fromhex(member["salt"])
        self.keys = FileKeys.of(key, salt)
        if not hmac.compare_digest(self.keys.check.hex(), member["key_check"]):
            raise EncryptionKeyError(f"this key does not open {where}: its key-check value differs "
                                     "(a wrong key, or another file's)")
        if not hmac.compare_digest(self.keys.index_mac(index_bytes), member["index_mac"]):
            raise DecryptionError(f"index of {where} was modified: its MAC does not match (names, shapes, "
                                  "codecs, checksums or metadata were changed after it was written)")
        self._aead = _aesgcm()(self.keys.chunk)
        self._invalid_tag = _invalid_tag()

    def open_into(self, blob, target, name: str, c: int, g: int) -> None:
        """Decrypt sealed chunk ``c`` of ``name`` (the file's ``g``) into
        ``target`` (its exact plaintext length). A tag that fails zeroes
        ``target`` (decrypt_into writes the unauthenticated plaintext first)
        and raises DecryptionError naming the chunk."""
        try:
            self._aead.decrypt_into(nonce(g), blob, aad(name, c), target)
        except self._invalid_tag:
            target[:] = 0
            raise DecryptionError(f"tensor {name!r} chunk {c}: authentication failed: the chunk was modified, "
                                  "moved or swapped (its tag does not match)") from None


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag
