"""The command line with encrypted checkpoints: the key from
LAZYSTORE_ENCRYPTION_KEY or --key-file, never from an argument."""

from __future__ import annotations

import json

import pytest

import lazystore as ls
from tests.cli.helpers import assert_one_error_line, run, same_bits

pytest.importorskip("cryptography")

KEY = bytes(range(32))


@pytest.fixture
def sealed(tmp_path, tensors):
    path = tmp_path / "sealed.lzy"
    ls.save(tensors, path, compression="zstd", encryption_key=KEY)
    return path


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / "key"
    path.write_bytes(KEY)  # 32 raw bytes
    return path


def test_info_and_ls_need_no_key(capsys, sealed):
    code, out, _ = run(capsys, "info", sealed, "--json")
    assert code == 0 and json.loads(out)["encrypted"] is True
    code, out, _ = run(capsys, "ls", sealed)
    assert code == 0 and "sealed" in out and "embed.weight" in out


def test_verify_with_the_key_from_the_environment(capsys, monkeypatch, sealed):
    monkeypatch.setenv("LAZYSTORE_ENCRYPTION_KEY", KEY.hex())
    code, out, _ = run(capsys, "verify", sealed)
    assert code == 0 and "intact" in out
    monkeypatch.setenv("LAZYSTORE_ENCRYPTION_KEY", (bytes(32)).hex())
    code, _, err = run(capsys, "verify", sealed)
    assert code == 2 and "this key does not open" in err
    assert_one_error_line(err)


def test_a_malformed_key_is_refused_without_echoing_it(capsys, monkeypatch, sealed):
    monkeypatch.setenv("LAZYSTORE_ENCRYPTION_KEY", "secret-not-hex")
    code, _, err = run(capsys, "verify", sealed)
    assert code == 2 and "64 hex digits" in err and "secret" not in err


def test_convert_encrypts_and_decrypts(capsys, tmp_path, tensors, key_file):
    plain = tmp_path / "plain.lzy"
    ls.save(tensors, plain)
    sealed = tmp_path / "s.lzy"
    code, _, err = run(capsys, "convert", plain, sealed, "--key-file", key_file)
    assert code == 0, err
    with ls.open(sealed) as ck:
        assert ck.info("embed.weight").compression == "sealed"
    hexed = tmp_path / "hexkey"
    hexed.write_text(KEY.hex() + "\n")
    back = tmp_path / "back.lzy"
    code, _, err = run(capsys, "convert", sealed, back, "--key-file", hexed, "--decrypt")
    assert code == 0, err
    same_bits(ls.load(back), tensors)
    code, _, err = run(capsys, "convert", sealed, tmp_path / "x.safetensors", "--key-file", key_file)
    assert code == 2 and "--decrypt" in err


def test_a_key_for_a_plaintext_file_is_refused(capsys, model, key_file):
    code, _, err = run(capsys, "verify", model, "--key-file", key_file)
    assert code == 2 and "is not encrypted" in err


def test_a_key_given_where_its_file_goes_is_not_echoed(capsys, sealed):
    code, _, err = run(capsys, "verify", sealed, "--key-file", KEY.hex())
    assert code == 2 and "cannot read the file --key-file names" in err and KEY.hex() not in err
