"""``ls.load(..., map_location=...)`` is never ignored: torch tensors land on
it; where nothing loaded is a torch tensor, any device but the CPU is
refused with an error pointing at lazystore.torch.load_file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lazystore as ls


@pytest.fixture
def flat(tmp_path):
    path = tmp_path / "flat.lzy"
    ls.save({"w": np.ones((2, 2), np.float32)}, path)
    return path


@pytest.mark.parametrize("where", ["cuda:0", "meta", torch.device("meta"), 0, "nonsense"])
def test_a_flat_checkpoint_refuses_a_device(flat, where):
    with pytest.raises(ls.InvalidInputError, match=r"lazystore\.torch\.load_file"):
        ls.load(flat, map_location=where)


@pytest.mark.parametrize("where", [None, "cpu", "cpu:0", torch.device("cpu")])
def test_the_cpu_is_where_numpy_arrays_are(flat, where):
    got = ls.load(flat, map_location=where)
    assert isinstance(got["w"], np.ndarray)


def test_nested_state_places_its_torch_tensors(tmp_path):
    path = tmp_path / "s.lzy"
    ls.save({"model": {"w": torch.ones(3)}, "np": np.zeros(2), "step": 1}, path)
    got = ls.load(path, map_location="meta")
    assert got["model"]["w"].device.type == "meta" and isinstance(got["np"], np.ndarray)
    # a selection holding only numpy arrays has nothing to place
    with pytest.raises(ls.InvalidInputError, match="holds none"):
        ls.load(path, keys=["np"], map_location="meta")
    assert isinstance(ls.load(path, keys=["np"], map_location="cpu")["np"], np.ndarray)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without a GPU")
def test_a_missing_gpu_is_a_clear_error(tmp_path):
    path = tmp_path / "s.lzy"
    ls.save({"w": torch.ones(3)}, path)
    with pytest.raises(ls.InvalidInputError, match=r"'cuda:0': no cuda device is available"):
        ls.load(path, map_location="cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_placement(tmp_path):  # pragma: no cover - CPU-only machines
    path = tmp_path / "s.lzy"
    ls.save({"w": torch.ones(3)}, path)
    assert ls.load(path, map_location="cuda:0")["w"].device == torch.device("cuda:0")
    with pytest.raises(ls.InvalidInputError, match="no such device"):
        ls.load(path, map_location=f"cuda:{torch.cuda.device_count()}")
