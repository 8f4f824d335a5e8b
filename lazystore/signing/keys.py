"""Signing keys: loading them (PEM files, PEM bytes, or ``cryptography`` key
objects), signing and checking bytes, and the key hint a bundle names.

Accepted keys are ECDSA on P-256, P-384 or P-521, the curves OpenSSF
model_signing accepts, and Ed25519, which only lazystore verifies
(model_signing refuses it). ECDSA signs with the hash that matches the
curve (SHA-256, SHA-384, SHA-512), as model_signing does, and
deterministically (RFC 6979), so signing the same file twice gives the same
``.sig`` byte for byte.

``cryptography`` is imported here and only here, on first use: without it a
key cannot be loaded, and the error says which extra to install.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

from lazystore._core.distribution import install_hint
from lazystore.errors import InvalidInputError, MissingDependencyError, SignatureError

# Where a password for an encrypted private key comes from: never an
# argument on a command line, where other users of the machine can read it.
PASSWORD_ENV = "LAZYSTORE_KEY_PASSWORD"
EXTRA = install_hint("crypto", "cryptography")
EC_CURVES = ("secp256r1", "secp384r1", "secp521r1")


def _crypto():
    """The ``cryptography`` modules this module uses, imported on first use."""
    try:
        serialization = importlib.import_module("cryptography.hazmat.primitives.serialization")
        return (serialization, importlib.import_module("cryptography.hazmat.primitives.asymmetric.ec"),
                importlib.import_module("cryptography.hazmat.primitives.asymmetric.ed25519"),
                importlib.import_module("cryptography.hazmat.primitives.hashes"),
                importlib.import_module("cryptography.exceptions"))
    except ImportError as exc:
        raise MissingDependencyError(f"signatures need cryptography: {EXTRA}") from exc


def _pem(key, what: str) -> tuple[bytes, str]:
    """The PEM bytes of ``key`` (a path or PEM bytes) and how to name it."""
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key), f"the {what} given"
    if isinstance(key, (str, os.PathLike)):
        path = Path(key)
        try:
            return path.read_bytes(), str(path)
        except FileNotFoundError:
            raise InvalidInputError(f"{what} {path}: no such file") from None
        except IsADirectoryError:
            raise InvalidInputError(f"{what} {path}: a folder, not a PEM key file") from None
    raise InvalidInputError(f"a {what} is a PEM file's path, PEM bytes or a cryptography key object, "
                            f"got {type(key).__name__}")


def _check_kind(key, where: str, public: bool):
    """``key`` itself if it is of a kind lazystore signs with, else InvalidInputError."""
    _, ec, ed25519, _, _ = _crypto()
    kinds = ((ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey) if public else
             (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey))
    if not isinstance(key, kinds):
        wanted = "public" if public else "private"
        raise InvalidInputError(f"{where}: not an ECDSA (P-256, P-384, P-521) or Ed25519 {wanted} key "
                                f"({type(key).__name__})")
    if isinstance(key, (ec.EllipticCurvePublicKey, ec.EllipticCurvePrivateKey)) and key.curve.name not in EC_CURVES:
        raise InvalidInputError(f"{where}: an ECDSA key on {key.curve.name}; lazystore signs with P-256, "
                                "P-384 or P-521")
    return key


def load_private_key(key):
    """A private key from a PEM file's path, PEM bytes, or a key object. An
    encrypted PEM takes its password from the environment variable
    ``LAZYSTORE_KEY_PASSWORD``."""
    serialization, _, _, _, _ = _crypto()
    if not isinstance(key, (bytes, bytearray, memoryview, str, os.PathLike)):
        return _check_kind(key, "private key", public=False)
    data, where = _pem(key, "private key")
    password = os.environ.get(PASSWORD_ENV)
    try:
        loaded = serialization.load_pem_private_key(data, password.encode() if password is not None else None)
    except TypeError:  # encrypted without a password, or a password for an unencrypted key
        state = "is not encrypted: unset" if password is not None else "is encrypted: set"
        raise InvalidInputError(f"{where} {state} {PASSWORD_ENV}") from None
    except ValueError as exc:
        raise InvalidInputError(f"{where}: not a PEM private key, or a wrong {PASSWORD_ENV} ({exc})") from None
    return _check_kind(loaded, where, public=False)


def load_public_key(key):
    """A public key from a PEM file's path (SubjectPublicKeyInfo, as
    ``openssl pkey -pubout`` writes it), PEM bytes, or a key object."""
    serialization, _, _, _, _ = _crypto()
    if not isinstance(key, (bytes, bytearray, memoryview, str, os.PathLike)):
        return _check_kind(key, "public key", public=True)
    data, where = _pem(key, "public key")
    try:
        loaded = serialization.load_pem_public_key(data)
    except ValueError as exc:
        raise InvalidInputError(f"{where}: not a PEM public key ({exc})") from None
    return _check_kind(loaded, where, public=True)


def key_hint(public_key) -> str:
    """What a Sigstore bundle names its key by: the SHA-256 (hex) of the
    key's SubjectPublicKeyInfo PEM, as model_signing computes it."""
    serialization, _, _, _, _ = _crypto()
    pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def _ecdsa(key, deterministic: bool):
    """The ECDSA scheme for a key's curve: model_signing's hash per curve."""
    _, ec, _, hashes, _ = _crypto()
    digest = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[key.curve.key_size]()
    return ec.ECDSA(digest, deterministic_signing=deterministic)


def sign_bytes(private_key, data: bytes) -> bytes:
    """The signature of ``data``: DER ECDSA (deterministic), or Ed25519's 64 bytes."""
    _, ec, _, _, _ = _crypto()
    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        return private_key.sign(data, _ecdsa(private_key, deterministic=True))
    return private_key.sign(data)


def check_signature(public_key, signature: bytes, data: bytes, what: str) -> None:
    """Raise SignatureError unless ``signature`` is ``public_key``'s over ``data``."""
    _, ec, _, _, exceptions = _crypto()
    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            public_key.verify(signature, data, _ecdsa(public_key, deterministic=False))
        else:
            public_key.verify(signature, data)
    except exceptions.InvalidSignature:
        raise SignatureError(f"{what}: the signature is not valid for this key (forged, altered, or made "
                             "with another key)") from None


__all__ = ["PASSWORD_ENV", "check_signature", "key_hint", "load_private_key", "load_public_key",
           "sign_bytes"]
