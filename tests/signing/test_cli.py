"""``lazystore sign``, ``lazystore verify --key`` and the index digest
``lazystore info`` prints."""

from __future__ import annotations

import json

import numpy as np

import lazystore as ls
from tests.cli.helpers import assert_one_error_line, run, run_process
from tests.signing.conftest import PRIVATE, PUBLIC


def test_sign_then_verify(capsys, digested):
    code, out, _ = run(capsys, "sign", digested, "--key", PRIVATE)
    assert code == 0 and f"signature written to {digested}.sig" in out
    code, out, _ = run(capsys, "verify", digested, "--key", PUBLIC)
    assert code == 0 and "signature OK, 3 tensors match their signed digests" in out
    code, out, _ = run(capsys, "verify", digested, "--key", PUBLIC, "--lazy")
    assert code == 0 and "index verified" in out
    code, out, _ = run(capsys, "verify", digested, "--key", PUBLIC, "--model-signing")
    assert code == 0 and "every file its signed SHA-256" in out


def test_sign_to_another_path(capsys, digested, tmp_path):
    out_sig = tmp_path / "elsewhere.sig"
    assert run(capsys, "sign", digested, "--key", PRIVATE, "--signature", out_sig)[0] == 0
    assert not (tmp_path / "model.lzy.sig").exists()
    assert run(capsys, "verify", digested, "--key", PUBLIC, "--signature", out_sig)[0] == 0
    code, _, err = run(capsys, "verify", digested, "--key", PUBLIC)
    assert code == 1 and "is not signed" in err


def test_a_failed_signature_is_exit_code_1_on_one_line(capsys, signed, tmp_path):
    (tmp_path / "model.lzy.sig").write_text("{}")
    code, _, err = run(capsys, "verify", signed, "--key", PUBLIC)
    assert code == 1 and "not a Sigstore signature bundle" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_signing_a_file_without_digests_says_how_to_add_them(capsys, tmp_path):
    path = tmp_path / "plain.lzy"
    ls.save({"a": np.zeros(3)}, path)
    code, _, err = run(capsys, "sign", path, "--key", PRIVATE)
    assert code == 2 and "lazystore convert FILE OUT --digest blake3" in err
    assert_one_error_line(err)


def test_signature_options_need_a_key(capsys, signed):
    for option in ("--lazy", "--model-signing"):
        code, _, err = run(capsys, "verify", signed, option)
        assert code == 2 and "--key PUBLIC.pem" in err
    code, _, err = run(capsys, "verify", signed, "--key", PUBLIC, "--lazy", "--model-signing")
    assert code == 2 and "choose one" in err


def test_info_prints_the_index_sha256_that_pins_the_file(capsys, digested):
    code, out, _ = run(capsys, "info", digested, "--json")
    pin = json.loads(out)["index_sha256"]
    with ls.open(digested, index_sha256=pin) as ck:
        assert len(ck) == 3
    code, out, _ = run(capsys, "info", digested)
    assert f"index sha256: {pin}" in out


def test_sign_and_verify_as_a_process(digested):
    done = run_process("sign", digested, "--key", PRIVATE)
    assert done.returncode == 0, done.stderr
    done = run_process("verify", digested, "--key", PUBLIC)
    assert done.returncode == 0 and "signature OK" in done.stdout, done.stderr
