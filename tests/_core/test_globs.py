"""A glob that matches nothing is an unknown name, in every entry point
that takes ``keys``: it raises TensorNotFoundError instead of loading {}."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls

FLAT = {"layers.0.w": np.ones((2, 3), np.float32), "layers.1.w": np.zeros(4, np.int64), "head": np.arange(3)}


@pytest.fixture
def flat(tmp_path):
    path = tmp_path / "flat.lzy"
    ls.save(FLAT, path, compression="zstd")
    return path


def _loaders():
    yield "ls.load", ls.load
    yield "ck.load", lambda path, keys: ls.open(path).load(keys)
    yield "select", lambda path, keys: dict(ls.open(path).select(keys))
    torch_files = pytest.importorskip("lazystore.torch")
    yield "load_file", lambda path, keys: torch_files.load_file(path, keys=keys)


LOADERS = dict(_loaders())


@pytest.fixture(params=["file", "sharded", "safetensors"])
def stored(request, tmp_path, flat):
    if request.param == "file":
        return flat
    if request.param == "sharded":
        path = tmp_path / "sharded"
        ls.save(FLAT, path, max_shard_size=32)
        return path
    path = tmp_path / "flat.safetensors"
    with ls.open(flat) as ck, ls.interop.SafetensorsWriter(path) as w:
        for name in ck:
            w.add(name, ck[name])
    return path


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("pattern", ["nothing*", "layers.?", "LAYERS.*", "head?"])
def test_a_glob_matching_nothing_raises(stored, loader, pattern):
    with pytest.raises(ls.TensorNotFoundError) as info:
        LOADERS[loader](stored, pattern)
    assert repr(pattern) in str(info.value)  # says which pattern found nothing
    assert isinstance(info.value, KeyError)  # as an unknown exact name is


@pytest.mark.parametrize("loader", LOADERS)
def test_a_glob_that_matches_and_an_empty_list(stored, loader):
    got = LOADERS[loader](stored, "layers.*")
    assert sorted(got) == ["layers.0.w", "layers.1.w"]
    assert LOADERS[loader](stored, []) == {}  # asks for nothing, gets nothing


def test_nested_state_glob_matching_nothing_raises(tmp_path):
    path = tmp_path / "state.lzy"
    ls.save({"model": {"w": np.ones(3)}, "step": 4}, path)
    assert list(ls.load(path, keys="model/*")) == ["model"]
    with pytest.raises(ls.TensorNotFoundError, match="'optim/\\*'"):
        ls.load(path, keys="optim/*")
    assert ls.load(path, keys=[]) == {}
