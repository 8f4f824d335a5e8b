"""The golden signature: ``tests/data/golden_v1_4_digest.lzy.sig`` was made
once by ``signing.sign(golden_v1_4_digest.lzy, tests/data/keys/test_p256.pem)``
(a test-only key) and committed. ECDSA signatures are deterministic
(RFC 6979), so signing the golden file again must give these bytes exactly:
a change to the statement's serialization, the bundle's layout or the
claims shows up here. Never regenerate it to make a test pass."""

from __future__ import annotations

import hashlib

import pytest

import lazystore as ls
from lazystore import signing
from tests.paths import DATA
from tests.signing.conftest import PRIVATE, PUBLIC

GOLDEN = DATA / "golden_v1_4_digest.lzy"
GOLDEN_SIG = DATA / "golden_v1_4_digest.lzy.sig"
SIG_SHA256 = "027df35d3f2366de471b8fcf082bf626e83a0efa8f04ebdaff8dc1a2a1077384"


def test_the_golden_signature_is_the_committed_one():
    assert hashlib.sha256(GOLDEN_SIG.read_bytes()).hexdigest() == SIG_SHA256


def test_signing_the_golden_file_again_reproduces_its_signature_byte_for_byte(tmp_path):
    again = signing.sign(GOLDEN, PRIVATE, signature=tmp_path / "again.sig")
    assert again.read_bytes() == GOLDEN_SIG.read_bytes()


def test_the_golden_signature_verifies(tmp_path):
    with ls.open(GOLDEN, public_key=PUBLIC) as ck:
        assert sorted(ck) == ["w", "zeros"]
    signing.verify(GOLDEN, PUBLIC, model_signing=True)


def test_model_signing_verifies_the_golden_signature():
    model_signing = pytest.importorskip("model_signing")
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=PUBLIC).verify(GOLDEN, GOLDEN_SIG)


def test_a_signature_is_created_readable_as_any_new_file_is(digested, tmp_path):
    sig = signing.sign(digested, PRIVATE)
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert sig.stat().st_mode == plain.stat().st_mode
