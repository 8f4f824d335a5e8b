"""Keys and signed checkpoints the signing tests share."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore import signing
from tests.paths import DATA

pytest.importorskip("cryptography")

KEYS = DATA / "keys"
PRIVATE = KEYS / "test_p256.pem"
PUBLIC = KEYS / "test_p256.pub.pem"


def make_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(28)
    return {"embed.weight": rng.standard_normal((256, 64)).astype(np.float32),
            "layer.0.bias": np.arange(64, dtype=np.float32),
            "steps": np.arange(5000, dtype=np.int64)}


def save_with_digests(tensors, path, **options):
    """A checkpoint with chunk digests (small chunks: several per tensor)."""
    ls.save(tensors, path, digest="blake3", chunk_bytes=options.pop("chunk_bytes", 4096), **options)
    return path


def sharded_with_digests(tensors, folder, max_shard_size: int = 40_000):
    """A folder of lazystore shards with chunk digests."""
    ls.save(tensors, folder, max_shard_size=max_shard_size, digest="blake3", chunk_bytes=4096)
    return folder


@pytest.fixture
def tensors():
    return make_tensors()


@pytest.fixture
def digested(tmp_path, tensors):
    """A checkpoint with chunk digests, not yet signed."""
    return save_with_digests(tensors, tmp_path / "model.lzy", compression="zstd")


@pytest.fixture
def signed(digested):
    """A checkpoint signed with the test key (its .sig beside it)."""
    signing.sign(digested, PRIVATE)
    return digested


def write_key_pair(folder, kind: str = "p256"):
    """A fresh key pair in PEM files: (private path, public path)."""
    from cryptography.hazmat.primitives import serialization as s
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(
        {"p256": ec.SECP256R1(), "p384": ec.SECP384R1(), "p521": ec.SECP521R1()}[kind])
    private, public = folder / f"{kind}.pem", folder / f"{kind}.pub.pem"
    private.write_bytes(key.private_bytes(s.Encoding.PEM, s.PrivateFormat.PKCS8, s.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(s.Encoding.PEM, s.PublicFormat.SubjectPublicKeyInfo))
    return private, public
