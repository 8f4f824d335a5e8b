"""The command line: every subcommand in-process (main([...]) with capsys),
and the entry point, exit codes and error lines through a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore import cli
from tests.paths import REPO



def make_tensors():
    rng = np.random.default_rng(0)
    return {
        "embed.weight": (rng.standard_normal((512, 64)) * 0.02).astype(np.float32),
        "layer0.bias": np.zeros(64, np.float32),
        "step": np.array(7, np.int64),
        "bf": rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16),
        "ids": (np.arange(20_000) % 7).astype(np.int64),
        "empty": np.zeros((0, 3), np.float64),
    }


@pytest.fixture
def tensors():
    return make_tensors()


@pytest.fixture
def model(tmp_path, tensors):
    path = tmp_path / "model.lzy"
    ls.save(tensors, path, compression="zstd", metadata={"model": "demo", "step": 1000})
    return path


@pytest.fixture
def nested(tmp_path):
    path = tmp_path / "nested.lzy"
    ls.save({"model": {"w": np.ones((2, 3), np.float32)}, "opt": [np.arange(4)], "epoch": 3, "best": float("inf")},
            path, metadata={"run": "x"})
    return path


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_process(*argv, **kwargs):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "lazystore", *map(str, argv)], capture_output=True,
                          text=True, env=env, timeout=60, check=False, **kwargs)


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def assert_one_error_line(err: str):
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lazystore: error: "), err


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- formatting helpers -----------------------------------------------------------


def test_human_size():
    assert cli.human_size(0) == "0 B"
    assert cli.human_size(1023) == "1023 B"
    assert cli.human_size(4096) == "4.0 KiB"
    assert cli.human_size(4 << 20) == "4.0 MiB"
    assert cli.human_size(3 << 29) == "1.5 GiB"


def test_format_shape_and_dtype_name():
    assert cli.format_shape((2048, 1024)) == "(2048, 1024)"
    assert cli.format_shape((5,)) == "(5,)"
    assert cli.format_shape(()) == "()"
    assert cli.dtype_name(np.dtype(">f4")) == "float32"
    assert cli.dtype_name(ml_dtypes.bfloat16) == "bfloat16"


@pytest.mark.parametrize("text, n", [("123", 123), ("500MB", 500 * 10**6), ("2GiB", 2 << 30),
                                     ("1.5 GB", 1_500_000_000), ("64kib", 65536), ("10B", 10)])
def test_parse_size(text, n):
    assert cli.parse_size(text) == n


@pytest.mark.parametrize("text", ["", "0", "2G", "5 XB", "-1MB", "MB", "1e9"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        cli.parse_size(text)


@pytest.mark.parametrize("shape", [(), (0, 3), (10,), (7, 5), (3, 4, 5), (2, 3, 4, 5)])
@pytest.mark.parametrize("limit", [1, 8, 24, 100, 10**6])
def test_blocks_cover_each_element_once(shape, limit):
    seen = np.zeros(shape, np.int64)
    for idx in cli.blocks(shape, 4, limit):
        seen[idx] += 1
        assert seen[idx].size * 4 <= max(limit, 4)  # bounded memory
        assert seen[idx].flags.c_contiguous  # a run of the file: whole chunks, no strided reads
    assert (seen == 1).all()


# -- info ---------------------------------------------------------------------------


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
    assert info["format"] == "lazystore" and info["format_version"] == ls.FORMAT_VERSION
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


# -- ls -------------------------------------------------------------------------------


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


# -- verify -----------------------------------------------------------------------------


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


# -- convert -----------------------------------------------------------------------------


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


def test_output_format_dispatch(tmp_path):
    assert cli.output_format("a.lzy") == "lazystore"
    assert cli.output_format("a") == "lazystore"
    assert cli.output_format("a.SafeTensors") == "safetensors"
    assert cli.output_format("a.npz") == "npz"
    assert cli.output_format("a.pt") == "torch"
    assert cli.output_format(tmp_path) == "folder"
    assert cli.output_format("out/") == "folder"


# -- diff ------------------------------------------------------------------------------------


def test_diff_identical(capsys, tmp_path, model):
    copy = tmp_path / "copy.lzy"
    ls.save(ls.load(model), copy, metadata={"model": "demo", "step": 1000})  # every tensor raw now
    code, out, err = run(capsys, "diff", model, copy)
    assert code == 0 and err == "" and out.startswith("same:")


def test_diff_reports_every_kind_of_change(capsys, tmp_path, model, tensors):
    t = dict(tensors)
    del t["layer0.bias"]
    t["new"] = np.ones(3)
    t["ids"] = tensors["ids"].astype(np.int32)  # dtype change
    t["bf"] = tensors["bf"].reshape(16, 32)  # shape change
    t["embed.weight"] = tensors["embed.weight"].copy()
    t["embed.weight"][5, 5] += 0.5
    t["embed.weight"][500, 0] -= 0.25
    t["step"] = np.array(9, np.int64)
    other = tmp_path / "other.lzy"
    ls.save(t, other, compression="zstd", metadata={"model": "demo", "step": 2000, "extra": [1, 2]})
    code, out, err = run(capsys, "diff", model, other)
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[:2] == [f"--- {model}", f"+++ {other}"]
    assert "- layer0.bias  float32 (64,)" in lines
    assert "+ new  float64 (3,)" in lines
    assert "~ ids  int64 (20000,) -> int32 (20000,)" in lines
    assert "~ bf  bfloat16 (32, 16) -> bfloat16 (16, 32)" in lines
    assert "~ embed.weight  values: 2 of 32,768 elements differ, max abs diff 0.5" in lines
    assert "~ step  values: 1 of 1 elements differ, max abs diff 2" in lines
    assert "~ metadata step: 1000 -> 2000" in lines
    assert "+ metadata extra: [1, 2]" in lines
    assert not any("empty" in line for line in lines)
    assert lines[-1] == ("different: 1 removed, 1 added, 2 changed dtype or shape, 2 changed values, "
                         "2 metadata differences")


def test_diff_values_in_small_blocks(capsys, monkeypatch, tmp_path):
    rng = np.random.default_rng(1)
    a = {"x": rng.standard_normal((64, 3, 50)).astype(np.float32), "y": np.arange(1000, dtype=np.int16)}
    b = {k: v.copy() for k, v in a.items()}
    b["x"][63, 2, 49] += 3.0  # the very last element
    b["x"][0, 0, 0] = np.nan
    b["y"][[0, 999]] = [-32768, 32767]
    pa, pb = tmp_path / "a.lzy", tmp_path / "b.lzy"
    ls.save(a, pa, compression="zstd", chunk_bytes=256)
    ls.save(b, pb, chunk_bytes=256)
    for limit in (64, 1000, 1 << 20):  # row blocks, per-row recursion, whole tensor
        monkeypatch.setattr(cli, "DIFF_BLOCK_BYTES", limit)
        code, out, _ = run(capsys, "diff", pa, pb)
        assert code == 1
        x = next(line for line in out.splitlines() if line.startswith("~ x"))
        assert x.startswith("~ x  values: 2 of 9,600 elements differ, max abs diff 3")
        assert x.endswith("(and NaN in one file only)")
        y = next(line for line in out.splitlines() if line.startswith("~ y"))
        assert y == "~ y  values: 2 of 1,000 elements differ, max abs diff 32768"


def test_value_diff_edge_cases():
    def describe(a, b):
        d = cli.ValueDiff(np.asarray(a).dtype)
        d.add(np.asarray(a), np.asarray(b))
        return d.describe(np.asarray(a).size)

    big = np.iinfo(np.int64)
    assert describe(np.array([big.min, 0]), np.array([big.max, 0])).endswith(f"max abs diff {2**64 - 1}")
    assert describe(np.array([0], np.uint64), np.array([2**64 - 1], np.uint64)).endswith(str(2**64 - 1))
    assert describe(np.array([0.0]), np.array([-0.0])) == "1 of 1 elements differ, max abs diff 0"
    nan_a = np.array([np.nan, np.inf], np.float32)
    nan_b = np.array([0x7FC00001, 0x7F800000], np.uint32).view(np.float32)  # another NaN's bits; inf
    assert describe(nan_a, nan_b) == "1 of 2 elements differ, max abs diff 0"
    assert describe(np.array([np.inf]), np.array([-np.inf])).endswith("max abs diff inf")
    assert describe(np.array([1 + 1j]), np.array([1 + 4j])).endswith("max abs diff 3")
    assert describe(np.array([True, False]), np.array([False, False])).endswith("max abs diff 1")
    f8 = np.array([1.0, 2.0], ml_dtypes.float8_e4m3fn)
    assert describe(f8, f8[::-1]).endswith("max abs diff 1")


def test_diff_nested_structure_change(capsys, tmp_path, nested):
    other = tmp_path / "other.lzy"
    ls.save({"model": {"w": np.ones((2, 3), np.float32)}, "opt": [np.arange(4)], "epoch": 4, "best": float("inf")},
            other, metadata={"run": "x"})
    code, out, _ = run(capsys, "diff", nested, other)
    assert code == 1 and "~ lazystore metadata __lazystore_tree__:" in out


def test_diff_unreadable_and_corrupt(capsys, tmp_path, model):
    copy = tmp_path / "copy.lzy"
    copy.write_bytes(model.read_bytes())
    with ls.open(copy) as ck:
        raw = ck.info("step")
    flip_byte(copy, raw.offset)
    code, _, err = run(capsys, "diff", model, copy)  # corrupt data is not a value difference
    assert code == 2 and str(copy) in err and "checksum" in err
    assert_one_error_line(err)
    code, _, err = run(capsys, "diff", model, tmp_path / "missing.lzy")
    assert code == 2
    assert_one_error_line(err)


def test_os_error_lines(tmp_path):
    assert cli._os_error(FileNotFoundError(2, "No such file or directory", "x.lzy"), None) == \
        "x.lzy: No such file or directory"
    try:  # a filesystem that puts only the path in its message
        try:
            raise ConnectionRefusedError(111, "Connect call failed")
        except ConnectionRefusedError as cause:
            raise FileNotFoundError("http://host/x.lzy") from cause
    except FileNotFoundError as exc:
        line = cli._os_error(exc, "http://host/x.lzy")
    assert line == "http://host/x.lzy: FileNotFoundError: [Errno 111] Connect call failed"
    assert cli._os_error(OSError(22, "Invalid argument"), tmp_path) == f"{tmp_path}: is a folder, not a checkpoint file"


# -- merge ---------------------------------------------------------------------------------------


@pytest.fixture
def parts(tmp_path):
    a = tmp_path / "a.lzy"
    b = tmp_path / "b.lzy"
    ls.save({"shared": np.zeros(4, np.float32), "only_a": np.arange(3)}, a, metadata={"k": "a", "from_a": 1})
    ls.save({"only_b": np.ones(2), "shared": np.ones(4, np.float32)}, b, compression="zstd",
            metadata={"k": "b", "from_b": 2})
    return a, b


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


def test_merge_unreadable_input(capsys, tmp_path, parts):
    bad = tmp_path / "bad.lzy"
    bad.write_bytes(b"not a checkpoint at all, just some text padding it out" * 2)
    code, _, err = run(capsys, "merge", tmp_path / "out.lzy", parts[0], bad)
    assert code == 2 and str(bad) in err
    assert_one_error_line(err)


# -- progress -----------------------------------------------------------------------------------


def test_progress_only_on_a_terminal(capsys, monkeypatch, tmp_path, model):
    pytest.importorskip("tqdm")
    assert run(capsys, "convert", model, tmp_path / "a.lzy")[2] == ""  # capsys: not a terminal
    monkeypatch.setattr(cli, "_stderr_is_tty", lambda: True)
    code, out, err = run(capsys, "convert", model, tmp_path / "b.lzy")
    assert code == 0 and "convert" in err and "%" in err
    assert "%" not in out


def test_progress_without_bar_libraries(capsys, monkeypatch, tmp_path, model):
    monkeypatch.setattr(cli, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(cli, "_make_bar", lambda *a: None)
    code, _, err = run(capsys, "verify", model)
    assert code == 0 and err == ""


def test_progress_helper_counts_weights(monkeypatch):
    updates = []

    class Bar:
        def update(self, n):
            updates.append(n)

        def close(self):
            updates.append("closed")

    monkeypatch.setattr(cli, "_stderr_is_tty", lambda: True)
    monkeypatch.setattr(cli, "_make_bar", lambda *a: Bar())
    assert list(cli.progress([1, 2, 3], desc="x", total=6, weight=lambda i: i * 10)) == [1, 2, 3]
    assert updates == [10, 20, 30, "closed"]


# -- the entry point, through a real process ----------------------------------------------------


def test_pyproject_declares_console_script():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"lazystore": "lazystore.cli:main"}


def test_process_help_and_usage():
    r = run_process("--help")
    assert r.returncode == 0
    for command in ("info", "ls", "verify", "convert", "diff", "merge"):
        assert command in r.stdout
    r = run_process()
    assert r.returncode == 2 and "usage:" in r.stderr
    r = run_process("frobnicate", "x")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_process_verify_exit_codes(tmp_path, model):
    r = run_process("verify", model)
    assert (r.returncode, r.stderr) == (0, "")
    with ls.open(model) as ck:
        offset = ck.info("embed.weight").offset
    flip_byte(model, offset + 100)
    r = run_process("verify", model)
    assert r.returncode == 1 and r.stdout.splitlines()[0] == "corrupt: embed.weight"
    model.write_bytes(model.read_bytes()[:-7])
    r = run_process("verify", model)
    assert r.returncode == 2 and r.stdout == ""
    assert_one_error_line(r.stderr)


def test_process_diff_exit_codes_and_quiet_pipes(tmp_path, model, tensors):
    other = tmp_path / "other.lzy"
    r = run_process("convert", model, other, "--compression", "none")
    assert (r.returncode, r.stderr) == (0, "")  # no progress bar into a pipe
    r = run_process("diff", model, other)
    assert (r.returncode, r.stderr) == (0, "")
    ls.save({**tensors, "step": np.array(8, np.int64)}, other)
    r = run_process("diff", model, other)
    assert r.returncode == 1 and "~ step  values:" in r.stdout


def test_process_info_json_and_errors(tmp_path, model):
    r = run_process("info", "--json", model)
    assert r.returncode == 0 and json.loads(r.stdout)["tensors"] == 6
    (tmp_path / "junk.lzy").write_bytes(os.urandom(300))
    for argv in (["info", tmp_path / "junk.lzy"], ["ls", tmp_path / "nope.lzy"], ["diff", model, tmp_path]):
        r = run_process(*argv)
        assert r.returncode == 2 and r.stdout == ""
        assert_one_error_line(r.stderr)


def test_process_ls_into_a_closed_pipe(tmp_path):
    path = tmp_path / "many.lzy"
    ls.save({f"t{i:05d}": np.zeros(1, np.uint8) for i in range(5000)}, path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(f'"{sys.executable}" -m lazystore ls "{path}" | head -n 2', shell=True,
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.stdout.splitlines()[1].startswith("t00000")
    assert "Traceback" not in r.stderr and "Error" not in r.stderr
