"""The primitives of sealed chunks (lazystore._core.aead): key derivation
checked against cryptography's own HKDF, nonces and associated data as
docs/format.md spells them, and what a failing tag leaves behind."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import lazystore as ls
from lazystore._core import aead

pytest.importorskip("cryptography")
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY = bytes(range(32))
SALT = bytes(range(100, 132))


@pytest.mark.parametrize(("info", "length"), [(aead.CHUNK_INFO, 32), (aead.MAC_INFO, 32), (aead.KCV_INFO, 16)])
def test_derived_keys_are_hkdf_sha256(info, length):
    assert aead.derive(KEY, SALT, info, length) == HKDF(SHA256(), length, SALT, info).derive(KEY)


def test_nonce_and_associated_data_bytes():
    assert aead.nonce(5) == bytes(4) + (5).to_bytes(8, "little")
    assert aead.aad("layer.ü", 3) == "layer.ü".encode() + b"\0" + (3).to_bytes(8, "little")


def test_a_sealed_chunk_is_aes_gcm_of_the_chunk_under_the_chunk_key():
    sealer = aead.Sealer(KEY, SALT)
    chunk = np.arange(100, dtype=np.uint8)
    sealed = sealer.seal(chunk, "w", 2, 7)
    expected = AESGCM(HKDF(SHA256(), 32, SALT, aead.CHUNK_INFO).derive(KEY)).encrypt(
        aead.nonce(7), chunk.tobytes(), aead.aad("w", 2))
    assert bytes(sealed) == expected and len(sealed) == 100 + aead.TAG_BYTES


def _opener(sealer: aead.Sealer, key=KEY) -> aead.Opener:
    index = sealer.patch(b'{"__lazystore_encryption__":' + _json(sealer.member()) + b"}")
    member = json.loads(index)["__lazystore_encryption__"]
    return aead.Opener(key, member, index, "f.lzy")


def _json(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def test_a_failing_tag_zeroes_the_target_and_names_the_chunk():
    sealer = aead.Sealer(KEY, SALT)
    sealed = sealer.seal(np.full(64, 7, np.uint8), "w", 0, 0)
    target = np.full(64, 255, np.uint8)
    with pytest.raises(ls.DecryptionError, match=r"tensor 'w' chunk 1") as err:
        _opener(sealer).open_into(sealed, target, "w", 1, 0)  # the chunk moved: another number
    assert isinstance(err.value, ls.ChecksumError)
    assert not target.any()  # decrypt_into wrote the unauthenticated plaintext there first


def test_the_key_check_refuses_another_key():
    with pytest.raises(ls.EncryptionKeyError, match="this key does not open f.lzy"):
        _opener(aead.Sealer(KEY, SALT), key=bytes(32))


def test_the_index_mac_covers_every_byte_but_its_own_digits():
    sealer = aead.Sealer(KEY, SALT)
    index = sealer.patch(b'{"a":1,"__lazystore_encryption__":' + _json(sealer.member()) + b"}")
    member = json.loads(index)["__lazystore_encryption__"]
    aead.Opener(KEY, member, index, "f.lzy")
    edited = index.replace(b'"a":1', b'"a":2')
    with pytest.raises(ls.DecryptionError, match="index of f.lzy was modified"):
        aead.Opener(KEY, member, edited, "f.lzy")


@pytest.mark.parametrize("key", [b"short", "x" * 32, 42])
def test_a_key_must_be_32_bytes(key):
    with pytest.raises(ls.InvalidInputError, match="encryption_key must be 32 bytes"):
        aead.resolve_key(key)


def test_a_callable_key_is_called_once():
    calls = []
    assert aead.resolve_key(lambda: calls.append(1) or KEY) == KEY
    assert calls == [1]


def test_without_cryptography_a_key_asks_for_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(ls.MissingDependencyError, match=r"pip install 'lazystore-ml\[crypto\]'"):
        aead.Sealer(KEY)
