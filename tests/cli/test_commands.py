"""lazystore.cli.commands: info, ls, verify, convert and merge, in-process
(main([...]) with capsys)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lazystore as ls
from tests.cli.helpers import assert_one_error_line, flip_byte, run, same_bits

# -- info ----------------------------------------------------------------------------------


def test_info(capsys, model, tensors):
    code, out, err = run(capsys, "info", model)
    assert code == 0 and err == ""
    assert "lazystore 1.0" in out
    assert f"tensors:      {len(tensors)}" in out
    total = sum(t.nbytes for t in tensors.values())
    assert f"({total:,} bytes)" in out
    assert "nested state: no" in out
    assert '"model": "demo"' in out and '"step": 1000' in out
    assert "x (" in out  # compression ratio


def test_info_json(capsys, model, tensors):
    code, out, _ = run(capsys, "info", model, "--json")
    info = json.loads(out)
    with ls.open(model) as ck:
        assert info["stored_nbytes"] == ck.stored_nbytes
    assert code == 0
    # ls.FORMAT_VERSION is the newest version lazystore writes; a file needing nothing newer is 1.0.
    assert info["format"] == "lazystore" and info["format_version"] == "1.0"
    assert info["tensors"] == len(tensors)
    assert info["nbytes"] == sum(t.nbytes for t in tensors.values())
    assert info["compression_ratio"] == pytest.approx(info["nbytes"] / info["stored_nbytes"])
    assert info["metadata"] == {"model": "demo", "step": 1000}
    assert info["nested"] is False
    assert sum(info["codecs"].values()) == len(tensors) and info["dtypes"]["int64"] == 2


def test_info_nested(capsys, nested):
    code, out, _ = run(capsys, "info", nested)
    assert code == 0 and "nested state: yes" in out
    info = json.loads(run(capsys, "info", "--json", nested)[1])
    assert info["nested"] is True and info["metadata"] == {"run": "x"}


def test_info_empty_checkpoint(capsys, tmp_path):
    path = tmp_path / "empty.lzy"
    ls.save({}, path)
    code, out, _ = run(capsys, "info", path)
    assert code == 0 and "tensors:      0" in out
    assert json.loads(run(capsys, "info", "--json", path)[1])["compression_ratio"] is None



# -- ls ------------------------------------------------------------------------------------


def test_ls(capsys, model, tensors):
    code, out, err = run(capsys, "ls", model)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "DTYPE", "SHAPE", "SIZE", "STORED", "CODEC"]
    assert [line.split()[0] for line in lines[1:]] == list(tensors)
    embed = next(line for line in lines if line.startswith("embed.weight"))
    assert "float32" in embed and "(512, 64)" in embed and "128.0 KiB" in embed and embed.endswith("zstd")
    step = next(line for line in lines if line.startswith("step "))
    assert "()" in step and step.endswith("raw")


def test_ls_glob(capsys, model):
    code, out, _ = run(capsys, "ls", model, "*.weight")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["embed.weight"]
    code, out, err = run(capsys, "ls", model, "nothing*")
    assert code == 1 and out == "" and "no tensor matches" in err


def test_ls_json(capsys, model, tensors):
    code, out, _ = run(capsys, "ls", "--json", model)
    rows = json.loads(out)
    assert code == 0
    assert [r["name"] for r in rows] == list(tensors)
    by_name = {r["name"]: r for r in rows}
    assert by_name["bf"] == {**by_name["bf"], "dtype": "bfloat16", "shape": [32, 16], "nbytes": 32 * 16 * 2}
    assert by_name["step"]["compression"] is None and by_name["step"]["shape"] == []
    assert by_name["ids"]["compression"] == "zstd" and by_name["ids"]["stored_nbytes"] < by_name["ids"]["nbytes"]


def test_ls_nested_names(capsys, nested):
    code, out, _ = run(capsys, "ls", nested, "model/*")
    assert code == 0 and out.splitlines()[1].split()[0] == "model/w"



# -- verify --------------------------------------------------------------------------------


def test_verify_intact(capsys, model):
    code, out, err = run(capsys, "verify", model)
    assert code == 0 and err == "" and "OK" in out


def test_verify_names_every_corrupt_tensor(capsys, model):
    with ls.open(model) as ck:
        raw = ck.info("step")  # too small to compress
        packed = ck.info("ids")
        assert raw.compression is None and packed.compression == "zstd"
    flip_byte(model, raw.offset)
    flip_byte(model, packed.offset + packed.stored_nbytes - 1)
    code, out, err = run(capsys, "verify", model)
    assert code == 1 and err == ""
    assert sorted(line.split()[1] for line in out.splitlines() if line.startswith("corrupt:")) == ["ids", "step"]
    assert "2 of 6 tensors corrupt" in out


@pytest.mark.parametrize("cut", [10, 1000, -1])
def test_verify_truncated_is_unreadable(capsys, model, cut):
    data = model.read_bytes()
    model.write_bytes(data[:cut])
    code, out, err = run(capsys, "verify", model)
    assert code == 2 and out == ""
    assert_one_error_line(err)
    assert str(model) in err


def test_verify_missing_file_and_folder(capsys, tmp_path):
    code, _, err = run(capsys, "verify", tmp_path / "nope.lzy")
    assert code == 2 and "No such file" in err
    assert_one_error_line(err)
    code, _, err = run(capsys, "verify", tmp_path)
    assert code == 2 and "folder" in err
    assert_one_error_line(err)


def test_verify_bad_index_is_unreadable(capsys, model):
    # The trailer's index checksum guards the index: a flip there fails at open.
    size = model.stat().st_size
    flip_byte(model, size - 60)
    code, _, err = run(capsys, "verify", model)
    assert code == 2
    assert_one_error_line(err)



# -- convert -------------------------------------------------------------------------------


def test_convert_raw_zstd_raw_bit_exact(capsys, tmp_path, model, tensors):
    raw, packed, back = tmp_path / "raw.lzy", tmp_path / "z.lzy", tmp_path / "back.lzy"
    assert run(capsys, "convert", model, raw, "--compression", "none")[0] == 0
    code, out, _ = run(capsys, "convert", raw, packed, "--compression", "zstd", "--level", "3")
    assert code == 0 and "6 tensors" in out
    assert run(capsys, "convert", packed, back, "--compression", "none")[0] == 0
    for path, codec in [(raw, None), (packed, "zstd"), (back, None)]:
        with ls.open(path) as ck:
            assert list(ck) == list(tensors)
            assert ck.metadata == {"model": "demo", "step": 1000}
            for name, t in tensors.items():
                assert same_bits(ck[name], t), name
                if t.nbytes > 4096:
                    assert ck.info(name).compression == codec, (path, name)
    assert packed.stat().st_size < raw.stat().st_size
    assert raw.read_bytes() == back.read_bytes()


def test_convert_keeps_codecs_by_default(capsys, tmp_path, model):
    out = tmp_path / "copy.lzy"
    assert run(capsys, "convert", model, out)[0] == 0
    with ls.open(model) as a, ls.open(out) as b:
        assert [a.info(n).compression for n in a] == [b.info(n).compression for n in b]
    assert run(capsys, "diff", model, out)[0] == 0


def test_convert_in_place(capsys, model, tensors):
    assert run(capsys, "convert", model, model, "--compression", "none")[0] == 0
    with ls.open(model) as ck:
        assert all(ck.info(n).compression is None for n in ck)
        assert all(same_bits(ck[n], t) for n, t in tensors.items())


def test_convert_keeps_nested_state(capsys, tmp_path, nested):
    out = tmp_path / "n2.lzy"
    assert run(capsys, "convert", nested, out, "--compression", "zstd")[0] == 0
    state = ls.load(out)
    assert state["epoch"] == 3 and state["best"] == float("inf")
    assert same_bits(state["model"]["w"], np.ones((2, 3), np.float32))
    assert isinstance(state["opt"], list) and same_bits(state["opt"][0], np.arange(4))
    with ls.open(out) as ck:
        assert ck.metadata == {"run": "x"}


def test_convert_refuses_corrupt_source(capsys, tmp_path, model):
    with ls.open(model) as ck:
        raw = ck.info("step")
    flip_byte(model, raw.offset)
    out = tmp_path / "out.lzy"
    code, _, err = run(capsys, "convert", model, out)
    assert code == 2 and "checksum" in err
    assert_one_error_line(err)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["model.lzy"]


@pytest.mark.slow
def test_convert_max_shard_size(capsys, tmp_path, model, tensors):
    code, _, err = run(capsys, "convert", model, tmp_path / "o", "--max-shard-size", "50KB")
    assert code == 0
    shards = sorted(p.name for p in (tmp_path / "o").glob("model-*.lzy"))
    assert len(shards) == 3 and (tmp_path / "o" / "lazystore.index.json").exists()
    code, out, _ = run(capsys, "diff", model, tmp_path / "o")
    assert code == 0 and out.startswith("same")
    code, _, err = run(capsys, "convert", model, tmp_path / "p", "--max-shard-size", "lots")
    assert code == 2 and "invalid size" in err
    assert not (tmp_path / "p").exists()
    code, _, err = run(capsys, "convert", model, tmp_path / "o.safetensors", "--max-shard-size", "50KB")
    assert code == 2 and "sharded safetensors output is not supported" in err
    assert_one_error_line(err)


def test_convert_option_errors(capsys, tmp_path, model):
    code, _, err = run(capsys, "convert", model, tmp_path / "o.npz")
    assert code == 2 and "npz output is not supported yet" in err
    assert_one_error_line(err)
    code, _, err = run(capsys, "convert", model, tmp_path / "o.lzy", "--compression", "none", "--level", "3")
    assert code == 2 and "--level" in err
    code, _, err = run(capsys, "convert", model, tmp_path / "o.lzy", "--level", "99")
    assert code == 2 and "1 to 22" in err
    code, _, err = run(capsys, "convert", model, tmp_path / "o.lzy", "--compression", "lz4")
    assert code == 2 and "invalid choice" in err
    assert list(tmp_path.iterdir()) == [model]



# -- merge ---------------------------------------------------------------------------------


@pytest.mark.parametrize("prefer, winner", [("first", 0.0), ("last", 1.0)])
def test_merge(capsys, tmp_path, parts, prefer, winner):
    out = tmp_path / "out.lzy"
    argv = ["merge", out, *parts] + ([] if prefer == "first" else ["--prefer", prefer])
    code, stdout, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert "3 tensors from 2 inputs, 1 duplicate name" in stdout
    with ls.open(out) as ck:
        assert list(ck) == ["shared", "only_a", "only_b"]
        assert same_bits(ck["shared"], np.full(4, winner, np.float32))
        assert same_bits(ck["only_a"], np.arange(3)) and same_bits(ck["only_b"], np.ones(2))
        assert ck.metadata == {"k": "a" if prefer == "first" else "b", "from_a": 1, "from_b": 2}
        assert ck.verify() == []


def test_merge_recompresses(capsys, tmp_path, parts):
    out = tmp_path / "out.lzy"
    assert run(capsys, "merge", out, *parts, "--compression", "none")[0] == 0
    with ls.open(out) as ck:
        assert all(ck.info(n).compression is None for n in ck)


def test_merge_refuses_nested_state(capsys, tmp_path, parts, nested):
    out = tmp_path / "out.lzy"
    code, _, err = run(capsys, "merge", out, parts[0], nested)
    assert code == 2 and "nested training state" in err and str(nested) in err
    assert_one_error_line(err)
    assert not out.exists()


def test_merge_names_the_corrupt_input(capsys, tmp_path, parts):
    # Tensors are read inside the copy into OUT: the error must still name
    # the input they came from, not the output being written.
    a, b = parts
    with ls.open(b) as ck:
        flip_byte(b, ck.info("only_b").offset)
    out = tmp_path / "out.lzy"
    code, _, err = run(capsys, "merge", out, a, b)
    assert code == 2 and "checksum" in err and f"error: {b}:" in err and str(out) not in err
    assert_one_error_line(err)
    assert not out.exists()


def test_merge_unreadable_input(capsys, tmp_path, parts):
    bad = tmp_path / "bad.lzy"
    bad.write_bytes(b"not a checkpoint at all, just some text padding it out" * 2)
    code, _, err = run(capsys, "merge", tmp_path / "out.lzy", parts[0], bad)
    assert code == 2 and str(bad) in err
    assert_one_error_line(err)
