"""lazystore.cli.diff: the value comparison, and ``lazystore diff`` end to end."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore.cli import diff
from tests.cli.helpers import assert_one_error_line, flip_byte, run


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


@pytest.mark.slow
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
        monkeypatch.setattr(diff, "DIFF_BLOCK_BYTES", limit)
        code, out, _ = run(capsys, "diff", pa, pb)
        assert code == 1
        x = next(line for line in out.splitlines() if line.startswith("~ x"))
        assert x.startswith("~ x  values: 2 of 9,600 elements differ, max abs diff 3")
        assert x.endswith("(and NaN in one file only)")
        y = next(line for line in out.splitlines() if line.startswith("~ y"))
        assert y == "~ y  values: 2 of 1,000 elements differ, max abs diff 32768"


def test_value_diff_edge_cases():
    def describe(a, b):
        d = diff.ValueDiff(np.asarray(a).dtype)
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
