"""Sharded folders: ls.save(..., max_shard_size=...) writes shards plus an
index, ls.open(folder) reads them as one view, verify() covers every shard;
Hugging Face folders (model.safetensors.index.json) open the same way."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors.numpy as stnp

import lazystore as ls
from lazystore import cli
from lazystore.interop import sharded


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def shards(folder) -> list[str]:
    """The shard file names the folder's index names, in order."""
    index = json.loads((folder / "lazystore.index.json").read_text())
    return sorted(set(index["weight_map"].values()))


def tensors():
    rng = np.random.default_rng(0)
    return {f"layer{i}.w": rng.standard_normal((64, 64)).astype(np.float32) for i in range(5)}


def test_save_and_open_a_sharded_folder(tmp_path):
    ref = tensors()
    folder = tmp_path / "ckpt"
    ls.save(ref, folder, max_shard_size=40_000, metadata={"step": 9})
    index = json.loads((folder / "lazystore.index.json").read_text())
    save = index["save_id"][:12]
    assert shards(folder) == [f"model-0000{i}-of-00003-{save}.lzy" for i in (1, 2, 3)]
    assert sorted(p.name for p in folder.iterdir()) == ["lazystore.index.json", *shards(folder)]
    assert index["weight_map"]["layer0.w"] == f"model-00001-of-00003-{save}.lzy"
    with ls.open(folder) as ck:
        assert list(ck) == list(ref) and ck.metadata == {"step": 9}
        assert all(same(ck[n], ref[n]) for n in ref)
        assert same(ck.get_slice("layer4.w")[3:5], ref["layer4.w"][3:5])
        assert ck.info("layer2.w").shape == (64, 64)
        assert ck.verify() == [] and ck.verify(["layer3.w"]) == []
        assert set(ck.select("layer[12]*")) == {"layer1.w", "layer2.w"}
        assert all(same(a, ref[n]) for n, a in ck.load().items())
    back = ls.load(folder, keys=["layer1.w"])
    assert list(back) == ["layer1.w"]


@pytest.mark.slow
def test_verify_covers_every_shard(tmp_path):
    folder = tmp_path / "ckpt"
    ls.save(tensors(), folder, max_shard_size=40_000)
    shard = folder / shards(folder)[2]
    with ls.open(shard) as ck:
        off = ck.info("layer4.w").offset
    data = bytearray(shard.read_bytes())
    data[off + 10] ^= 1
    shard.write_bytes(bytes(data))
    with ls.open(folder) as ck:
        assert ck.verify() == ["layer4.w"]
    assert cli.main(["verify", str(folder)]) == 1


def test_nested_state_round_trips(tmp_path):
    state = {"model": {"w": np.ones((100, 10), np.float32), "b": np.zeros(10)}, "step": 4, "hist": [np.arange(3)]}
    ls.save(state, tmp_path / "s", max_shard_size=1000)
    back = ls.load(tmp_path / "s")
    assert back["step"] == 4 and same(back["model"]["w"], state["model"]["w"])
    assert isinstance(back["hist"], list) and same(back["hist"][0], state["hist"][0])


def test_resave_with_fewer_shards_removes_stale_ones(tmp_path):
    folder = tmp_path / "ckpt"
    ls.save(tensors(), folder, max_shard_size=20_000)
    assert len(list(folder.glob("model-*.lzy"))) == 5
    ls.save(tensors(), folder, max_shard_size=1 << 30)
    assert len(shards(folder)) == 1 and shards(folder)[0].startswith("model-00001-of-00001-")
    assert sorted(p.name for p in folder.iterdir()) == ["lazystore.index.json", *shards(folder)]
    with ls.open(folder) as ck:
        assert len(ck) == 5


def test_shards_of_another_save_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ls.save(tensors(), a, max_shard_size=40_000)
    ls.save(tensors(), b, max_shard_size=40_000)
    (a / shards(a)[1]).write_bytes((b / shards(b)[1]).read_bytes())
    with pytest.raises(ls.FormatError, match="another save"):
        ls.open(a)


@pytest.mark.parametrize("damage", ["missing-shard", "wrong-map", "escape", "not-json", "no-index"])
def test_inconsistent_folders_give_format_error(tmp_path, damage):
    folder = tmp_path / "ckpt"
    ls.save(tensors(), folder, max_shard_size=40_000)
    index_path = folder / "lazystore.index.json"
    index = json.loads(index_path.read_text())
    names = shards(folder)
    if damage == "missing-shard":
        (folder / names[1]).unlink()
    elif damage == "wrong-map":
        index["weight_map"]["layer0.w"] = names[1]
    elif damage == "escape":
        index["weight_map"]["layer0.w"] = "../" + names[0]
    elif damage == "not-json":
        index_path.write_text("{")
    elif damage == "no-index":
        index_path.unlink()
    if damage in ("wrong-map", "escape"):
        index_path.write_text(json.dumps(index))
    with pytest.raises(ls.FormatError):
        ls.open(folder)


def test_hugging_face_folder_opens_as_one_view(tmp_path):
    ref = tensors()
    folder = tmp_path / "hf"
    folder.mkdir()
    names = list(ref)
    parts = [names[:2], names[2:]]
    weight_map = {}
    for i, part in enumerate(parts, start=1):
        fname = f"model-0000{i}-of-00002.safetensors"
        stnp.save_file({n: ref[n] for n in part}, str(folder / fname))
        weight_map.update({n: fname for n in part})
    (folder / sharded.HF_INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    with ls.open(folder) as ck:
        assert set(ck) == set(ref) and all(same(ck[n], ref[n]) for n in ref)
        assert "safetensors" in ck.format
        with pytest.raises(ls.VerificationUnavailableError):
            ck.verify()
    # Verify-on-access is refused as verify() is, naming the first shard.
    with pytest.raises(ls.VerificationUnavailableError, match="model-00001-of-00002.safetensors.*no lazystore"):
        ls.open(folder, verify=True)
    # Convert the whole folder to one lazystore file and back to shards.
    assert cli.main(["convert", str(folder), str(tmp_path / "one.lzy")]) == 0
    assert cli.main(["convert", str(tmp_path / "one.lzy"), str(tmp_path / "shards"), "--max-shard-size", "40KB"]) == 0
    with ls.open(tmp_path / "shards") as ck:
        assert len(ck.shards) == 3 and ck.verify() == []
        assert all(same(ck[n], ref[n]) for n in ref)


def test_duplicate_tensor_across_shards(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    stnp.save_file({"a": np.ones(2)}, str(folder / "x.safetensors"))
    stnp.save_file({"a": np.ones(2)}, str(folder / "y.safetensors"))
    weight_map = {"a": "x.safetensors", "b": "y.safetensors"}
    (folder / sharded.HF_INDEX_NAME).write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ls.FormatError):
        ls.open(folder)


@pytest.mark.parametrize("make", ["fifo", "folder", "link-out"])
def test_a_shard_is_opened_only_as_a_regular_file_in_the_folder(tmp_path, make):
    import os

    folder = tmp_path / "ckpt"
    ls.save(tensors(), folder, max_shard_size=40_000)
    shard = folder / shards(folder)[1]
    if make == "fifo":
        shard.unlink()
        os.mkfifo(shard)  # a plain open would wait for a writer forever
    elif make == "folder":
        shard.unlink()
        shard.mkdir()
    else:
        shard.rename(tmp_path / shard.name)
        shard.symlink_to(tmp_path / shard.name)
    why = "link out of the folder" if make == "link-out" else "not a regular file"
    with pytest.raises(ls.FormatError, match=rf"shard {shard.name} cannot be read: .*{why}"):
        ls.open(folder)


def test_a_shard_linked_within_the_folder_is_read(tmp_path):
    ref = tensors()
    folder = tmp_path / "ckpt"
    ls.save(ref, folder, max_shard_size=40_000)
    shard = folder / shards(folder)[1]
    shard.rename(folder / "moved.bin")
    shard.symlink_to("moved.bin")
    with ls.open(folder) as ck:
        assert all(same(ck[n], ref[n]) for n in ref)
