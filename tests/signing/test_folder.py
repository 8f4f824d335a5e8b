"""A signed folder of lazystore shards: ``DIR/model.sig`` covers
``lazystore.index.json`` and every shard's index."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore import signing
from tests.signing.conftest import PRIVATE, PUBLIC, sharded_with_digests
from tests.signing.test_sign import rewrite_index


@pytest.fixture
def folder(tmp_path, tensors):
    folder = sharded_with_digests(tensors, tmp_path / "sharded")
    assert signing.sign(folder, PRIVATE) == folder / "model.sig"
    return folder


def test_a_signed_folder_opens_and_verifies(folder, tensors):
    with ls.open(folder, public_key=PUBLIC) as ck:
        assert len(ck.shards) > 1
        assert all(np.array_equal(ck[n], tensors[n]) for n in tensors)
    assert np.array_equal(ls.load(folder, public_key=PUBLIC)["steps"], tensors["steps"])
    signing.verify(folder, PUBLIC)
    signing.verify(folder, PUBLIC, lazy=True)
    signing.verify(folder, PUBLIC, model_signing=True)


def test_a_shard_whose_index_was_edited_is_refused(folder):
    with ls.open(folder) as ck:
        shard = next(v.name for v in ck.shards if "layer.0.bias" in v)
    rewrite_index(type(folder)(shard), b"layer.0.bias", b"layer.0.biaz")
    with pytest.raises(ls.SignatureError, match="index is not the one the signature vouches for"):
        ls.open(folder, public_key=PUBLIC)


def test_an_edited_folder_index_is_refused(folder):
    index = folder / "lazystore.index.json"
    index.write_bytes(index.read_bytes().replace(b"{", b"{ ", 1))  # same meaning, other bytes
    with ls.open(folder) as ck:
        assert len(ck) == 3
    with pytest.raises(ls.SignatureError, match="lazystore.index.json"):
        ls.open(folder, public_key=PUBLIC)


def test_a_file_signature_does_not_open_a_folder(folder, tmp_path, tensors):
    other = tmp_path / "one.lzy"
    ls.save(tensors, other, digest="blake3")
    sig = signing.sign(other, PRIVATE)
    with pytest.raises(ls.SignatureError, match="signs a file, but a folder is being opened"):
        ls.open(folder, public_key=PUBLIC, signature=sig)
    with pytest.raises(ls.SignatureError, match="signs a folder, but a file is being opened"):
        ls.open(other, public_key=PUBLIC, signature=folder / "model.sig")


def test_a_folder_without_a_lazystore_index_cannot_be_signed(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ls.InvalidInputError, match="not a lazystore sharded checkpoint"):
        signing.sign(tmp_path / "empty", PRIVATE)


def test_a_pin_is_for_one_file(folder):
    with pytest.raises(ls.InvalidInputError, match="pins one file's index"):
        ls.open(folder, index_sha256="0" * 64)
