"""Hostile and fuzzed encrypted files (format 1.4, rules S1-S4): every one
is refused with a lazystore error, with the key or without it, before
anything it claims is used."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazystore as ls
from tests.hypothesis_profiles import examples
from tests.properties.test_hostile import Parts, apply_mutations, mutation

pytest.importorskip("cryptography")

KEY = bytes(range(32))
MEMBER = "__lazystore_encryption__"


@pytest.fixture(scope="module")
def sealed_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("sealed") / "s.lzy"
    with ls.Writer(path, encryption_key=KEY, chunk_bytes=128, metadata={"s": [1, 2]}) as w:
        w.add("w", np.arange(64, dtype=np.float32).reshape(16, 4))  # codec 128, 2 chunks
        w.add("z", np.zeros((32, 4), dtype=np.float32), compression="zstd")  # codec 129, 4 chunks
        w.add("b", np.array([True, False, True]))
    return path.read_bytes()


def _parts(blob: bytes) -> Parts:
    p = Parts.parse(blob)
    p.trailer["minor"] = 4
    return p


def _member(p: Parts) -> dict:
    return json.loads(p.metadata)[MEMBER]


def _with_member(p: Parts, member: dict) -> None:
    meta = json.loads(p.metadata)
    meta[MEMBER] = member
    p.metadata = json.dumps(meta, separators=(",", ":")).encode()


def _save(tmp_path, p: Parts):
    path = tmp_path / "hostile.lzy"
    path.write_bytes(p.build())
    return path


def _refused_on_open(path, error=ls.FormatError, match=None):
    with pytest.raises(error, match=match):
        ls.open(path).close()


def test_a_sealed_codec_without_the_member_is_refused(sealed_bytes, tmp_path):
    p = _parts(sealed_bytes)
    meta = json.loads(p.metadata)
    del meta[MEMBER]
    p.metadata = json.dumps(meta).encode()
    _refused_on_open(_save(tmp_path, p), match="no __lazystore_encryption__ member.*S3")


def test_the_member_in_a_file_older_than_1_4_is_refused(sealed_bytes, tmp_path):
    p = _parts(sealed_bytes)
    p.trailer["minor"] = 3
    p.data[10:12] = (3).to_bytes(2, "little")  # the preamble's minor
    _refused_on_open(_save(tmp_path, p), match=r"format 1\.3 file.*S3")


def test_a_plaintext_tensor_smuggled_into_an_encrypted_file_is_refused(sealed_bytes, tmp_path):
    p = _parts(sealed_bytes)
    p.entries["codec"][2] = 0  # "b" claims to be raw plaintext
    _refused_on_open(_save(tmp_path, p), match="not sealed.*S4")


@pytest.mark.parametrize(("change", "error", "match"), [
    ({"version": 2}, ls.UnsupportedVersionError, "version 2 is newer"),
    ({"aead": "xchacha20-poly1305"}, ls.UnsupportedVersionError, "aead"),
    ({"salt": "00"}, ls.FormatError, "salt is not 64 lowercase hex"),
    ({"key_check": None}, ls.FormatError, "key_check"),
    ({"index_mac": "X" * 64}, ls.FormatError, "index_mac"),
])
def test_a_malformed_member_is_refused(sealed_bytes, tmp_path, change, error, match):
    p = _parts(sealed_bytes)
    _with_member(p, {**_member(p), **change})
    _refused_on_open(_save(tmp_path, p), error, match)


def test_a_sealed_raw_chunk_without_its_tag_is_refused_before_use(sealed_bytes, tmp_path):
    p = _parts(sealed_bytes)
    p.chunks["stored_nbytes"][0] -= 16  # S1: 128 bytes decoded must be 144 stored
    p.entries["stored_nbytes"][0] -= 16
    with ls.open(_save(tmp_path, p)) as ck, pytest.raises(ls.FormatError, match="tag"):
        ck.info("w")


def test_a_sealed_zstd_chunk_shorter_than_header_and_tag_is_refused(sealed_bytes, tmp_path):
    p = _parts(sealed_bytes)
    first = 2  # z's chunk 0 (after w's two)
    shrink = int(p.chunks["stored_nbytes"][first]) - 19  # S2: at least 4 * 4 planes + 16
    p.chunks["stored_nbytes"][first] -= shrink
    p.entries["stored_nbytes"][1] -= shrink
    with ls.open(_save(tmp_path, p)) as ck, pytest.raises(ls.FormatError, match="plane header"):
        ck.info("z")


def _exercise(path) -> None:
    for key in (None, KEY):
        with ls.open(path, encryption_key=key) as ck:
            for name in ck:
                ck.info(name)
                ck.get_slice(name)[...]
                ck[name]
            ck.load()
            ck.verify()


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_sealed_files_only_lazystore_errors_escape(sealed_bytes, tmp_path, mutations):
    path = tmp_path / "fuzz.lzy"
    path.unlink(missing_ok=True)  # never rewrite a file another view may map
    path.write_bytes(apply_mutations(sealed_bytes, mutations))
    try:
        _exercise(path)
    except ls.LazyStoreError:
        pass


def test_the_unmutated_seed_reads_with_and_without_the_key(sealed_bytes, tmp_path):
    path = tmp_path / "seed.lzy"
    path.write_bytes(sealed_bytes)
    with ls.open(path, encryption_key=KEY) as ck:
        assert ck.verify() == [] and ck["w"][3, 1] == 13
    with pytest.raises(ls.EncryptionKeyError):
        _exercise(path)
