"""lazystore.hf.save_pretrained writes what transformers' save_pretrained
writes, the weights as lazystore's: one model.lzy, or lazystore's shards
under max_shard_size (transformers' size strings accepted); the folder then
holds one model."""

from __future__ import annotations

import json
import os

import pytest
import torch
import transformers

import lazystore as ls
import lazystore.hf as lh
from lazystore.hf.saving import shard_size
from tests.hf.helpers import bit_identical, outputs


@pytest.mark.slow
def test_the_folder_is_transformers_own_but_for_the_weights(minilm_model, tmp_path):
    lh.save_pretrained(minilm_model, tmp_path / "lazy")
    minilm_model.save_pretrained(tmp_path / "theirs")
    assert sorted(os.listdir(tmp_path / "lazy")) == ["config.json", "model.lzy"]
    assert sorted(os.listdir(tmp_path / "theirs")) == ["config.json", "model.safetensors"]
    config = [json.loads((tmp_path / f / "config.json").read_text()) for f in ("lazy", "theirs")]
    assert config[0] == config[1]
    with ls.open(tmp_path / "lazy" / "model.lzy") as ours, ls.open(tmp_path / "theirs" / "model.safetensors") as st:
        assert sorted(ours) == sorted(st)
        assert all((ours[n] == st[n]).all() for n in st)
        assert ours.metadata == {"format": "pt"}  # as transformers marks its weights


@pytest.mark.slow
def test_sharded_save_takes_transformers_size_strings(minilm_model, batch, tmp_path):
    lh.save_pretrained(minilm_model, tmp_path, compression="zstd", max_shard_size="30MB")
    names = sorted(os.listdir(tmp_path))
    shards = [n for n in names if n.endswith(".lzy")]
    assert names == sorted(["config.json", "lazystore.index.json", *shards]) and len(shards) > 1
    # 30 MB of decoded tensors a shard, but for a tensor bigger than that (the 47 MB word embeddings)
    with ls.open(tmp_path) as ck:
        assert max(ck.info(n).nbytes for n in ck) > 30e6
    model = lh.from_pretrained(transformers.AutoModel, tmp_path)
    assert bit_identical(outputs(model, batch), outputs(minilm_model, batch))
    # Saving it whole again replaces the shards and their index.
    lh.save_pretrained(minilm_model, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.lzy"]


@pytest.mark.slow
def test_a_save_replaces_the_transformers_weights_in_the_folder(minilm_model, tmp_path):
    minilm_model.save_pretrained(tmp_path, max_shard_size="30MB")  # model-0000N-of-0000M.safetensors + index
    assert "model.safetensors.index.json" in os.listdir(tmp_path)
    lh.save_pretrained(minilm_model, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["config.json", "model.lzy"]


@pytest.mark.parametrize(("size", "expected"), [("5GB", 5 * 10**9), ("500MiB", 500 * 2**20), ("1.5kb", 1500),
                                                (123, 123), (None, None)])
def test_shard_sizes(size, expected):
    assert shard_size(size) == expected


@pytest.mark.parametrize("size", ["5 parsecs", "GB", 0, -1, True, 2.5])
def test_bad_shard_sizes_are_refused(size):
    with pytest.raises(ls.InvalidInputError, match="max_shard_size"):
        shard_size(size)


@pytest.mark.parametrize("argument", ["push_to_hub", "variant"])
def test_arguments_naming_other_weights_are_refused_before_anything_is_written(argument, tmp_path):
    model = transformers.BertModel(transformers.BertConfig(hidden_size=8, num_hidden_layers=1,
                                                           num_attention_heads=2, intermediate_size=8))
    with pytest.raises(ls.InvalidInputError, match=argument):
        lh.save_pretrained(model, tmp_path / "out", **{argument: "x"})
    assert not (tmp_path / "out").exists()


def test_a_file_is_not_a_folder(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ls.InvalidInputError, match="folder"):
        lh.save_pretrained(torch.nn.Linear(2, 2), tmp_path / "file")
