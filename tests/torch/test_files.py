"""lazystore.torch's save_file / load_file / save / load: round trips, lazy
selection, zero-copy writable loads, shared and non-contiguous tensors, bad
input, and files the real safetensors wrote."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import safetensors.torch as st
import torch

import lazystore as ls
from lazystore._core.ties import KEY as ALIASES
from lazystore.torch import load, load_file, save, save_file


def tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "embed": torch.randn(64, 16, generator=g),
        "w_bf16": torch.randn(32, 8, generator=g).to(torch.bfloat16),
        "ids": torch.arange(100, dtype=torch.int64),
        "mask": torch.rand(5, 5, generator=g) > 0.5,
        "scalar": torch.tensor(3.5, dtype=torch.float64),
        "empty": torch.zeros(0, 4),
    }


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (torch.equal has no kernels for float8/float4)."""
    def bits(t):
        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    return a.dtype == b.dtype and a.shape == b.shape and (a.numel() == 0 or torch.equal(bits(a), bits(b)))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_round_trip(tmp_path, compression):
    ref = tensors()
    save_file(ref, tmp_path / "t.lzy", metadata={"format": "pt", "step": 7}, compression=compression)
    got = load_file(tmp_path / "t.lzy")
    assert list(got) == list(ref)
    assert all(same(got[k], ref[k]) and got[k].device.type == "cpu" for k in ref)
    with ls.open(tmp_path / "t.lzy") as ck:  # a flat file any lazystore reader reads
        assert ck.metadata == {"format": "pt", "step": 7} and "__lazystore_tree__" not in ck.system_metadata
        assert (ck.info("embed").compression is not None) == (compression is not None)


def test_raw_tensors_load_zero_copy_writable_and_never_written_back(tmp_path):
    path = tmp_path / "t.lzy"
    save_file({"w": torch.zeros(1024, 256)}, path)
    before = path.read_bytes()
    a, b = load_file(path)["w"], load_file(path)["w"]
    a += 1  # writable: no copy was made up front, and this copies only the pages written
    assert b.sum().item() == 0 and path.read_bytes() == before
    if sys.platform.startswith("linux"):  # zero-copy: the tensor's memory is a mapping of the file
        assert mapped_file(b.data_ptr()) == str(path.resolve())


def mapped_file(address: int) -> str | None:
    """The file mapped at ``address`` in this process (Linux), or None."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= address < hi:
                return fields[5].strip() if len(fields) > 5 else None
    return None


def test_keys_read_only_the_selected_tensors(tmp_path):
    path = tmp_path / "t.lzy"
    ref = {f"layers.{i}.w": torch.full((256, 64), float(i)) for i in range(4)}
    save_file(ref, path, compression="zstd", chunk_bytes=4096)
    # Damage layer 3's stored bytes: loading other layers never reads (or checks) them.
    with ls.open(path) as ck:
        info = ck.info("layers.3.w")
    data = bytearray(path.read_bytes())
    data[info.offset + info.stored_nbytes // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert list(load_file(path, keys="layers.[01].w")) == ["layers.0.w", "layers.1.w"]
    got = load_file(path, keys=["layers.2.w", "layers.0.w"])
    assert list(got) == ["layers.2.w", "layers.0.w"] and same(got["layers.2.w"], ref["layers.2.w"])
    with pytest.raises(ls.ChecksumError):
        load_file(path, keys=["layers.3.w"])
    with pytest.raises(ls.TensorNotFoundError, match="nope"):
        load_file(path, keys=["nope"])
    with pytest.raises(ls.InvalidInputError):
        load_file(path, keys=3)


def test_tied_tensors_are_stored_once_and_come_back_tied(tmp_path):
    emb = torch.randn(1000, 64)
    state = {"embed.weight": emb, "lm_head.weight": emb, "other": torch.ones(3)}
    path = tmp_path / "t.lzy"
    save_file(state, path)
    with ls.open(path) as ck:
        assert list(ck) == ["embed.weight", "other"]  # the data once
        assert ck.stored_nbytes == emb.nbytes + 12
        assert ck.system_metadata[ALIASES]["aliases"] == {"lm_head.weight": "embed.weight"}
    got = load_file(path)
    assert list(got) == ["embed.weight", "other", "lm_head.weight"]
    assert got["lm_head.weight"] is got["embed.weight"] and same(got["embed.weight"], emb)
    # selecting an alias reads its tensor; selecting both gives one object
    assert list(load_file(path, keys=["lm_head.weight"])) == ["lm_head.weight"]
    both = load_file(path, keys="*.weight")
    assert both["lm_head.weight"] is both["embed.weight"]


def test_overlapping_and_non_contiguous_tensors_are_saved_as_their_values(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    state = {
        "base": base,
        "rows": base[1:3],  # overlaps base: stored as its own values, not an alias
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "expanded": torch.ones(1, 4).expand(3, 4),
        "conj": torch.tensor([1 + 2j, 3 - 1j]).conj(),  # the conjugate bit is resolved
        "neg": torch.tensor([1.0, -2.0])._neg_view(),
        "channels_last": torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
    }
    save_file(state, tmp_path / "t.lzy")
    got = load_file(tmp_path / "t.lzy")
    for name, t in state.items():
        assert torch.equal(got[name], t.resolve_conj().resolve_neg()), name
        assert got[name].is_contiguous(), name
    with ls.open(tmp_path / "t.lzy") as ck:
        assert ALIASES not in ck.system_metadata


def test_the_same_view_under_two_names_is_an_alias_other_views_are_not(tmp_path):
    base = torch.arange(10.0)
    state = {"a": base[2:5], "b": base[2:5], "c": base[2:6], "d": base.view(2, 5)[0, 2:5]}
    save_file(state, tmp_path / "t.lzy")
    with ls.open(tmp_path / "t.lzy") as ck:
        # d is the same memory with the same shape and strides as a: an alias too
        assert ck.system_metadata[ALIASES]["aliases"] == {"b": "a", "d": "a"}
    got = load_file(tmp_path / "t.lzy")
    assert got["b"] is got["a"] and got["c"].tolist() == [2.0, 3.0, 4.0, 5.0]


def test_save_and_load_bytes():
    ref = tensors()
    data = save(ref, metadata={"a": "b"})
    assert data[:4] == b"\x89LZY" and isinstance(data, bytes)
    got = load(data)
    assert all(same(got[k], ref[k]) for k in ref)
    got["embed"] += 1  # owns its memory: the temporary file is gone
    assert same(load(bytearray(data))["embed"], ref["embed"])
    assert same(load(st.save({"x": torch.ones(3)}))["x"], torch.ones(3))  # safetensors bytes too
    with pytest.raises(ls.InvalidInputError, match="bytes"):
        load("model.safetensors")


def test_reads_what_safetensors_wrote(tmp_path):
    ref = tensors()
    path = tmp_path / "ref.safetensors"
    st.save_file(ref, path, metadata={"format": "pt"})
    got = load_file(path)
    assert list(got) == list(st.load_file(path)) or set(got) == set(ref)
    assert all(same(got[k], ref[k]) for k in ref)
    assert list(load_file(path, keys="w_*")) == ["w_bf16"]


def test_reads_sharded_folders(tmp_path):
    ref = {f"layer{i}": torch.full((64, 64), float(i)) for i in range(6)}
    ls.save({k: v.numpy() for k, v in ref.items()}, tmp_path / "folder", max_shard_size=40_000)
    assert len(list((tmp_path / "folder").glob("*.lzy"))) > 1
    got = load_file(tmp_path / "folder", keys=["layer5", "layer0"])
    assert same(got["layer5"], ref["layer5"]) and same(got["layer0"], ref["layer0"])


@pytest.mark.slow
def test_real_weights_bit_exact_through_raw_and_compressed_files(tmp_path, minilm):
    # all-MiniLM-L6-v2's trained weights: what safetensors.torch loads, lazystore.torch loads.
    ref = st.load_file(minilm)
    for compression in (None, "zstd"):
        path = tmp_path / f"minilm-{compression}.lzy"
        save_file(ref, path, compression=compression)
        got = load_file(path)
        assert set(got) == set(ref) and all(same(got[k], ref[k]) for k in ref)
    with ls.open(tmp_path / "minilm-zstd.lzy") as ck:
        assert ck.stored_nbytes < ck.nbytes  # it did compress


def test_tensors_on_other_devices_and_parameters_are_saved(tmp_path):
    p = torch.nn.Parameter(torch.randn(3, 3))
    save_file({"p": p, "meta_free": torch.ones(2)}, tmp_path / "t.lzy")
    got = load_file(tmp_path / "t.lzy")
    assert type(got["p"]) is torch.Tensor and not got["p"].requires_grad and torch.equal(got["p"], p.detach())


@pytest.mark.parametrize("bad, match", [
    ("notadict", "expected a dict of str to torch.Tensor, got str"),
    ({"a": {"nested": 1}}, "'a' is a dict, not a torch.Tensor"),
    ({"a": np.zeros(2)}, "'a' is a ndarray, not a torch.Tensor"),
    ({1: torch.zeros(2)}, "names must be str"),
    ({"m": torch.zeros(2, device="meta")}, "meta device"),
    ({"s": torch.eye(2).to_sparse()}, "to_dense"),
    ({"b": torch.empty(2, dtype=torch.bits8)}, "cannot be stored"),
], ids=["str", "dict", "ndarray", "int-name", "meta", "sparse", "bits8"])
def test_bad_input_is_refused_before_writing(tmp_path, bad, match):
    with pytest.raises(ls.InvalidInputError, match=match):
        save_file(bad, tmp_path / "t.lzy")
    assert list(tmp_path.iterdir()) == []


def test_bad_options_and_targets(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="unknown option.*max_shard_size.*compression"):
        save_file({"a": torch.zeros(2)}, tmp_path / "t.lzy", max_shard_size=10)
    with pytest.raises(ls.InvalidInputError, match="codec|compression"):
        save_file({"a": torch.zeros(2)}, tmp_path / "t.lzy", compression="lz4")
    with pytest.raises(ls.InvalidInputError, match="is a folder"):
        save_file({"a": torch.zeros(2)}, tmp_path)
    with pytest.raises(ls.InvalidInputError, match="metadata"):
        save_file({"a": torch.zeros(2)}, tmp_path / "t.lzy", metadata={"x": float("nan")})
    with pytest.raises(ls.InvalidInputError, match="backend"):
        load_file(tmp_path / "t.lzy", backend="io_uring")
    assert list(tmp_path.iterdir()) == []


def test_a_corrupt_alias_record_is_a_format_error(tmp_path):
    path = tmp_path / "t.lzy"
    with ls.Writer(path) as w:
        w.system_metadata[ALIASES] = {"version": 1, "aliases": {"b": "missing"}}
        w.add("a", np.zeros(2, np.float32))
    with pytest.raises(ls.FormatError, match="aliases"):
        load_file(path)
    with ls.Writer(path) as w:
        w.system_metadata[ALIASES] = {"version": 9, "aliases": {}}
        w.add("a", np.zeros(2, np.float32))
    with pytest.raises(ls.FormatError, match="version 1, got 9"):
        load_file(path)


def test_ls_load_of_a_flat_numpy_file_points_here(tmp_path):
    # issue #25: save_file's flat torch files load as torch tensors on
    # map_location with ls.load too; a flat numpy file has no torch to place
    ls.save({"w": np.ones(2, np.float32)}, tmp_path / "n.lzy")
    with pytest.raises(ls.InvalidInputError, match=r"lazystore\.torch\.load_file"):
        ls.load(tmp_path / "n.lzy", map_location="meta")
    assert load_file(tmp_path / "n.lzy", device="meta")["w"].device.type == "meta"
    save_file({"w": torch.ones(2)}, tmp_path / "t.lzy")
    assert ls.load(tmp_path / "t.lzy", map_location="meta")["w"].device.type == "meta"
