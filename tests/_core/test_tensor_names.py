"""One set of tensor-name rules, whatever writes the file: every save path
refuses a bad name with the same InvalidInputError, before anything is
written (lazystore/_core/tensor_names.py)."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
import lazystore.numpy as ls_numpy


def _saves(tmp_path):
    """Each public way to write tensors: (label, save(tensors) -> path written)."""
    def lzy(t):
        ls.save(t, tmp_path / "a.lzy")
    def safetensors(t):
        ls.save(t, tmp_path / "a.safetensors")
    def sharded(t):
        ls.save(t, tmp_path / "shards", max_shard_size=1 << 20)
    def writer(t):
        with ls.Writer(tmp_path / "w.lzy") as w:
            for name, a in t.items():
                w.add(name, a)
    def torch_save_file(t):
        torch = pytest.importorskip("torch")
        import lazystore.torch as ls_torch

        ls_torch.save_file({k: torch.from_numpy(v) for k, v in t.items()}, tmp_path / "t.lzy")
    def numpy_save_file(t):
        ls_numpy.save_file(t, tmp_path / "n.lzy")
    return {"ls.save .lzy": lzy, "ls.save .safetensors": safetensors, "ls.save sharded": sharded,
            "Writer.add": writer, "lazystore.torch.save_file": torch_save_file,
            "lazystore.numpy.save_file": numpy_save_file}


@pytest.mark.parametrize("how", list(_saves(".")))
def test_a_lone_surrogate_is_refused_by_every_save_naming_it(tmp_path, how):
    # safetensors saves used to raise a bare UnicodeEncodeError from the header.
    with pytest.raises(ls.InvalidInputError, match=r"'\\ud800'( at the top level)? cannot be encoded as UTF-8"):
        _saves(tmp_path)[how]({"\ud800": np.zeros(2, np.float32)})
    assert [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("how", ["ls.save .lzy", "ls.save sharded", "Writer.add", "lazystore.torch.save_file",
                                 "lazystore.numpy.save_file"])
def test_a_nul_is_refused_where_names_end_in_one(tmp_path, how):
    with pytest.raises(ls.InvalidInputError, match=r"'a\\x00b' contains a NUL character"):
        _saves(tmp_path)[how]({"a\0b": np.zeros(2, np.float32)})
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_nul_is_a_name_safetensors_can_hold(tmp_path):
    from safetensors.numpy import load_file

    ls.save({"a\0b": np.ones(2, np.float32)}, tmp_path / "a.safetensors")
    assert list(load_file(tmp_path / "a.safetensors")) == ["a\0b"]


@pytest.mark.parametrize("how", ["Writer.add", "lazystore.torch.save_file", "lazystore.numpy.save_file"])
def test_a_name_that_is_no_str_is_refused(tmp_path, how):
    # (ls.save takes int keys: nested state, each key a path component.)
    with pytest.raises(ls.InvalidInputError, match="names must be str, got int: 3"):
        _saves(tmp_path)[how]({3: np.zeros(2, np.float32)})
