"""Interoperability with OpenSSF model_signing (1.1.1), both ways: its
Python API and its command line accept lazystore's signatures, and
lazystore verifies the signatures model_signing writes (whole files only:
they carry no claims about the index)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

import lazystore as ls
from lazystore import signing
from lazystore.cli import main
from tests.signing.conftest import PRIVATE, PUBLIC, sharded_with_digests, write_key_pair

model_signing = pytest.importorskip("model_signing")


def _cli(*argv):
    """model_signing's command line, in a subprocess (its console script
    when on PATH, else ``python -m model_signing``)."""
    script = shutil.which("model_signing")
    command = [script] if script else [sys.executable, "-m", "model_signing"]
    return subprocess.run([*command, *map(str, argv)], capture_output=True, text=True, timeout=120, check=False)


def _python_api_verify(model, sig, public=PUBLIC):
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=public).verify(model, sig)


def test_model_signing_python_api_accepts_lazystores_signature(signed):
    _python_api_verify(signed, str(signed) + ".sig")


def test_model_signing_cli_accepts_lazystores_signature(signed):
    done = _cli("verify", "key", "--signature", str(signed) + ".sig", "--public_key", PUBLIC, signed)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Verification succeeded" in done.stdout


def test_model_signing_refuses_a_tampered_file_lazystore_signed(signed):
    with open(signed, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ValueError, match="Hash mismatch"):
        _python_api_verify(signed, str(signed) + ".sig")


def test_model_signing_cannot_verify_an_ed25519_signature(tmp_path, digested):
    """Ed25519 is lazystore's alone: model_signing accepts NIST curves only."""
    private, public = write_key_pair(tmp_path, "ed25519")
    sig = signing.sign(digested, private)
    signing.verify(digested, public)
    with pytest.raises((ValueError, AttributeError)):  # 1.1.1 fails asking the key for its curve
        _python_api_verify(digested, sig, public)


def test_lazystore_verifies_a_signature_model_signing_wrote(digested):
    sig = str(digested) + ".sig"
    model_signing.signing.Config().use_elliptic_key_signer(private_key=PRIVATE).sign(digested, sig)
    signing.verify(digested, PUBLIC)  # whole file: the SHA-256 model_signing signed
    signing.verify(digested, PUBLIC, model_signing=True)


def test_a_model_signing_signature_cannot_be_checked_lazily(digested, capsys):
    """model_signing's statement vouches for the file's SHA-256 only, not
    its index: lazystore refuses to open it lazily, saying what to do."""
    model_signing.signing.Config().use_elliptic_key_signer(private_key=PRIVATE).sign(digested, str(digested) + ".sig")
    with pytest.raises(ls.SignatureError, match="cannot be checked lazily"):
        ls.open(digested, public_key=PUBLIC)
    with pytest.raises(ls.SignatureError, match="cannot be checked lazily"):
        signing.verify(digested, PUBLIC, lazy=True)
    assert main(["verify", str(digested), "--key", str(PUBLIC)]) == 0
    assert "every file matches its signed SHA-256" in capsys.readouterr().out


def test_lazystore_refuses_a_tampered_file_model_signing_signed(digested):
    model_signing.signing.Config().use_elliptic_key_signer(private_key=PRIVATE).sign(digested, str(digested) + ".sig")
    with open(digested, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ls.SignatureError, match="hash mismatch"):
        signing.verify(digested, PUBLIC)


def test_model_signing_accepts_a_signed_folder(tmp_path, tensors):
    folder = sharded_with_digests(tensors, tmp_path / "sharded")
    (folder / "README.md").write_text("a model card beside the shards\n")
    sig = signing.sign(folder, PRIVATE)
    _python_api_verify(folder, sig)
    done = _cli("verify", "key", "--signature", sig, "--public_key", PUBLIC, folder)
    assert done.returncode == 0, done.stdout + done.stderr
    (folder / "README.md").write_text("changed\n")
    with pytest.raises(ValueError, match="Hash mismatch for 'README.md'"):
        _python_api_verify(folder, sig)
    with pytest.raises(ls.SignatureError, match="README.md: hash mismatch"):
        signing.verify(folder, PUBLIC, model_signing=True)
    signing.verify(folder, PUBLIC)  # the shards themselves are intact
