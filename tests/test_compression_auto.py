"""compression="auto" on every save path: codec 4 ("huffman") for the
dtypes with a float layout, codec 1 ("zstd") for the rest, as info() reports
per tensor, and every tensor back bit for bit."""

from __future__ import annotations

import warnings

import fsspec
import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore._native import layout as fmt
from lazystore.cli.main import main as cli
from lazystore.interop.convert import to_lazystore
from lazystore.interop.sharded_writer import ShardedWriter

KEY = bytes(range(32))


def weights(dtype, n: int, seed: int = 0) -> np.ndarray:
    """Weight-like floats (a few percent of them changed by ``seed``)."""
    w = np.random.default_rng(0).standard_normal(n).astype(np.float32) * 0.05
    w[: n // 50] += seed * 0.01
    return w.astype(dtype)


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """One tensor of each float layout, and ones without a layout."""
    return {
        "bf16": weights(ml_dtypes.bfloat16, 40000, seed),
        "fp32": weights(np.float32, 30000, seed),
        "fp16": weights(np.float16, 30000, seed),
        "fp8": weights(ml_dtypes.float8_e4m3fn, 30000, seed),
        "fp64": weights(np.float64, 20000, seed),
        "ids": np.arange(20000, dtype=np.int64) % 700,
        "mask": np.arange(20000) % 3 == 0,
    }


# The dtypes with a float layout, which "auto" stores as codec 4.
FLOATS = {np.dtype(t) for t in (ml_dtypes.bfloat16, np.float32, np.float16, ml_dtypes.float8_e4m3fn)}


def expected_codecs(original: dict[str, np.ndarray], sealed: bool = False) -> dict[str, str]:
    """The codec each tensor is stored with under "auto"."""
    prefix = "sealed+" if sealed else ""
    return {name: prefix + ("huffman" if a.dtype in FLOATS else "zstd") for name, a in original.items()}


def check(ck, original: dict[str, np.ndarray], sealed: bool = False) -> None:
    """``ck`` holds ``original`` bit for bit, stored as "auto" picks."""
    assert {name: ck.info(name).compression for name in original} == expected_codecs(original, sealed)
    for name, array in original.items():
        got = np.asarray(ck[name])
        assert got.dtype == array.dtype and got.tobytes() == array.tobytes(), name


def check_file(path, original: dict[str, np.ndarray], **open_options) -> None:
    with ls.open(path, **open_options) as ck:
        check(ck, original, sealed="encryption_key" in open_options)
        assert ck.verify() == []


def minor_of(data: bytes) -> int:
    head = fmt.decode_preamble(data)[1]
    assert fmt.decode_trailer(data, len(data)).minor == head
    return head


# -- ls.save, save_async and the Writer ----------------------------------------------------------


def test_save_picks_huffman_for_floats_and_zstd_for_the_rest(tmp_path):
    t = tensors()
    ls.save(t, tmp_path / "a.lzy", compression="auto")
    check_file(tmp_path / "a.lzy", t)
    assert minor_of((tmp_path / "a.lzy").read_bytes()) == fmt.EXPONENT_MINOR


def test_auto_stores_what_huffman_stores_and_less_than_zstd(tmp_path):
    t = tensors()
    for compression in ("auto", "huffman", "zstd"):
        ls.save(t, tmp_path / f"{compression}.lzy", compression=compression)
    assert (tmp_path / "auto.lzy").read_bytes() == (tmp_path / "huffman.lzy").read_bytes()
    with ls.open(tmp_path / "auto.lzy") as auto, ls.open(tmp_path / "zstd.lzy") as zstd:
        assert auto.stored_nbytes < zstd.stored_nbytes


def test_save_async_and_nested_state(tmp_path):
    t = tensors()
    ls.save_async(t, tmp_path / "a.lzy", compression="auto").result()
    check_file(tmp_path / "a.lzy", t)
    ls.save({"model": {"w": t["bf16"], "ids": t["ids"]}, "step": 3}, tmp_path / "n.lzy", compression="auto")
    with ls.open(tmp_path / "n.lzy") as ck:
        assert sorted(ck.info(n).compression for n in ck) == ["huffman", "zstd"]
    restored = ls.load(tmp_path / "n.lzy")
    assert restored["step"] == 3 and restored["model"]["w"].tobytes() == t["bf16"].tobytes()


def test_compression_level_still_applies(tmp_path):
    # "auto" takes zstd's level for its zstd tensors, as "zstd" does.
    t = {"ids": np.arange(300000) // 7 % 1000, "fp32": tensors()["fp32"]}
    stored = {}
    for compression in ("auto", "zstd"):
        for level in (1, 19):
            path = tmp_path / f"{compression}{level}.lzy"
            ls.save(t, path, compression=compression, compression_level=level)
            with ls.open(path) as ck:
                stored[compression, level] = {name: ck.info(name).stored_nbytes for name in t}
            check_file(path, t) if compression == "auto" else None
    for level in (1, 19):
        assert stored["auto", level]["ids"] == stored["zstd", level]["ids"]
    assert stored["auto", 19]["ids"] < stored["auto", 1]["ids"]
    with pytest.raises(ls.InvalidInputError, match="compression_level"):
        ls.save(t, tmp_path / "x.lzy", compression="auto", compression_level=40)


def test_a_writer_with_auto_and_per_tensor_choices(tmp_path):
    t = tensors()
    with ls.Writer(tmp_path / "w.lzy", compression="auto") as w:
        for name, array in t.items():
            w.add(name, array)
        w.add("bf16 as zstd", t["bf16"], compression="zstd")
        w.add("bf16 raw", t["bf16"], compression=None)
    with ls.Writer(tmp_path / "p.lzy", compression="zstd") as w:
        w.add("bf16", t["bf16"], compression="auto")
        w.add("ids", t["ids"], compression="auto")
    with ls.open(tmp_path / "w.lzy") as ck:
        check(ck, t)
        assert ck.info("bf16 as zstd").compression == "zstd" and ck.info("bf16 raw").compression is None
    check_file(tmp_path / "p.lzy", {"bf16": t["bf16"], "ids": t["ids"]})


def test_an_upload_with_auto_states_1_5_from_its_first_bytes(tmp_path):
    # An upload cannot rewrite its preamble: "auto" may store codec 4, so it
    # states 1.5 from the start, even for a file that ends up holding none.
    fs = fsspec.filesystem("memory")
    for name, t in (("floats", tensors()), ("ints", {"ids": np.arange(5000)})):
        url = f"memory://lazystore-auto-test/{name}.lzy"
        with ls.Writer(url, compression="auto") as w:
            for key, array in t.items():
                w.add(key, array)
        assert minor_of(fs.cat_file(url)) == fmt.EXPONENT_MINOR
        with ls.open(url) as ck:
            check(ck, t)


# -- encryption ----------------------------------------------------------------------------------


def test_encryption_with_auto_seals_huffman_and_zstd(tmp_path):
    t = tensors()
    ls.save(t, tmp_path / "s.lzy", compression="auto", encryption_key=KEY)
    check_file(tmp_path / "s.lzy", t, encryption_key=KEY)
    with ls.open(tmp_path / "s.lzy") as ck, pytest.raises(ls.EncryptionKeyError):
        ck["bf16"]


# -- sharded folders, conversion and the command line --------------------------------------------


def test_sharded_folders(tmp_path):
    t = tensors()
    ls.save(t, tmp_path / "sharded", compression="auto", max_shard_size=100_000)
    with ls.open(tmp_path / "sharded") as ck:
        check(ck, t)
    with ShardedWriter(tmp_path / "writer", compression="auto", max_shard_size=100_000) as w:
        for name, array in t.items():
            w.add(name, array)
    with ls.open(tmp_path / "writer") as ck:
        check(ck, t)


def test_convert_with_auto(tmp_path):
    t = tensors()
    ls.save(t, tmp_path / "raw.lzy")
    to_lazystore(tmp_path / "raw.lzy", tmp_path / "auto.lzy", compression="auto")
    check_file(tmp_path / "auto.lzy", t)
    to_lazystore(tmp_path / "auto.lzy", tmp_path / "kept.lzy")  # None keeps each tensor's codec
    check_file(tmp_path / "kept.lzy", t)


def test_cli_convert_and_merge_take_compression_auto(tmp_path, capsys):
    t = tensors()
    first = {k: v for k, v in t.items() if k in ("bf16", "ids")}
    second = {k: v for k, v in t.items() if k not in first}
    ls.save(first, tmp_path / "a.lzy")
    ls.save(second, tmp_path / "b.lzy")
    assert cli(["convert", str(tmp_path / "a.lzy"), str(tmp_path / "c.lzy"), "--compression", "auto"]) == 0
    check_file(tmp_path / "c.lzy", first)
    assert cli(["merge", str(tmp_path / "m.lzy"), str(tmp_path / "a.lzy"), str(tmp_path / "b.lzy"),
                "--compression", "auto", "--level", "5"]) == 0
    check_file(tmp_path / "m.lzy", t)


def test_cli_refuses_an_unknown_compression_listing_auto(tmp_path, capsys):
    ls.save({"w": np.ones(3, np.float32)}, tmp_path / "a.lzy")
    assert cli(["convert", str(tmp_path / "a.lzy"), str(tmp_path / "c.lzy"), "--compression", "autoo"]) == 2
    assert "'auto'" in capsys.readouterr().err
    assert not (tmp_path / "c.lzy").exists()


@pytest.mark.parametrize("where", ["save", "writer", "manager", "per tensor"])
def test_unknown_compression_names_are_refused_listing_the_choices(tmp_path, where):
    message = "unknown compression 'Auto'; use None, 'zstd', 'huffman' or 'auto'"
    with pytest.raises(ls.InvalidInputError, match=message):
        if where == "save":
            ls.save({"w": np.ones(3, np.float32)}, tmp_path / "x.lzy", compression="Auto")
        elif where == "writer":
            ls.Writer(tmp_path / "x.lzy", compression="Auto")
        elif where == "manager":
            ls.CheckpointManager(tmp_path / "ckpt", compression="Auto")
        else:
            with ls.Writer(tmp_path / "x.lzy") as w:
                w.add("w", np.ones(3, np.float32), compression="Auto")
    assert not (tmp_path / "x.lzy").exists()


# -- checkpoint managers -------------------------------------------------------------------------


def state(step: int) -> dict:
    t = tensors(step)
    return {"model": {"bf16": t["bf16"], "fp32": t["fp32"], "ids": t["ids"]}, "step": step}


def test_checkpoint_manager_with_auto(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, compression="auto")
    mgr.save(1, state(1))
    with mgr.open(1) as ck:
        check(ck, {f"model/{k}": v for k, v in state(1)["model"].items()})
    restored = mgr.restore(1)
    assert restored["step"] == 1 and restored["model"]["bf16"].tobytes() == state(1)["model"]["bf16"].tobytes()


def test_checkpoint_manager_deltas_over_auto(tmp_path):
    # The newest checkpoint is whole (codec 4 for its floats); an older one
    # becomes codec-3 deltas against it, and restores bit for bit.
    mgr = ls.CheckpointManager(tmp_path, compression="auto", delta=True)
    for step in (1, 2):
        mgr.save(step, state(step))
    with mgr.open(2) as newest:
        check(newest, {f"model/{k}": v for k, v in state(2)["model"].items()})
    with mgr.open(1) as older:
        assert mgr.files.base_name(1) == mgr.path(2).name
        assert {older.info(f"model/{k}").compression for k in ("bf16", "fp32")} == {"delta"}
        assert older.verify() == []
    for step in (1, 2):
        restored = mgr.restore(step)
        for name, array in state(step)["model"].items():
            assert np.asarray(restored["model"][name]).tobytes() == array.tobytes()


# -- the framework paths -------------------------------------------------------------------------


def test_torch_and_numpy_save_file(tmp_path):
    torch = pytest.importorskip("torch")
    from lazystore.numpy import save_file as numpy_save_file
    from lazystore.torch import save_file as torch_save_file

    t = {"fp32": tensors()["fp32"], "ids": tensors()["ids"]}
    numpy_save_file(t, tmp_path / "n.lzy", compression="auto")
    check_file(tmp_path / "n.lzy", t)
    torch_save_file({k: torch.from_numpy(v) for k, v in t.items()}, tmp_path / "t.lzy", compression="auto")
    check_file(tmp_path / "t.lzy", t)


def test_dcp_writer_and_consolidate(tmp_path):
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from lazystore.dcp import LazyStoreWriter, consolidate, rank_file

    t = {"fp32": tensors()["fp32"], "ids": tensors()["ids"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({k: torch.from_numpy(v) for k, v in t.items()},
                 storage_writer=LazyStoreWriter(tmp_path / "dcp", compression="auto"), no_dist=True)
    with ls.open(tmp_path / "dcp" / rank_file(0)) as ck:
        check(ck, {ck_name: t[ck_name.partition("[")[0]] for ck_name in ck})
    consolidate(tmp_path / "dcp", tmp_path / "one.lzy", compression="auto")
    check_file(tmp_path / "one.lzy", t)


def test_lightning_plugin(tmp_path):
    torch = pytest.importorskip("torch")
    pytest.importorskip("lightning")
    from lazystore.lightning import LazyStoreCheckpointIO

    w = tensors()["fp32"].reshape(100, 300)
    io = LazyStoreCheckpointIO(compression="auto")
    io.save_checkpoint({"state_dict": {"w": torch.from_numpy(w)}, "epoch": 1}, tmp_path / "x.ckpt")
    with ls.open(tmp_path / "x.ckpt") as ck:
        assert {ck.info(n).compression for n in ck if ck.info(n).dtype == np.float32} == {"huffman"}
    assert io.load_checkpoint(tmp_path / "x.ckpt")["state_dict"]["w"].numpy().tobytes() == w.tobytes()


def test_hf_save_pretrained(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import lazystore.hf as lh

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=40, max_position_embeddings=32)
    model = transformers.BertModel(config)
    lh.save_pretrained(model, tmp_path, compression="auto")
    with ls.open(tmp_path) as ck:
        # A float32 tensor is codec 4, or raw where no codec saves 1% (a few small biases).
        codecs = {n: ck.info(n).compression for n in ck if ck.info(n).dtype == np.float32}
        assert set(codecs.values()) == {"huffman", None}
        assert all(ck.info(n).nbytes < 1024 for n, c in codecs.items() if c is None)
        for name, p in model.state_dict().items():
            if name in ck:
                assert np.asarray(ck[name]).tobytes() == p.numpy().tobytes(), name
