"""Loading onto a CUDA GPU through lazystore's pinned staging buffers
(lazystore/_core/staging.py): every dtype bit-exact, tensors bigger than a
buffer, buffers filled across many tensors, compressed files, selections,
tied tensors, models and nested state. Skipped without a GPU (CI has none);
the errors for a missing GPU are tested in test_placement.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lazystore as ls
import lazystore.torch as lst
from lazystore._core import staging
from tests.torch.test_dtypes import random_tensor
from tests.torch.test_files import same

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU = torch.device("cuda:0")


@pytest.fixture
def small_buffers(monkeypatch):
    """Staging buffers of 64 KiB, so a test's tensors cross many of them."""
    monkeypatch.setattr(staging, "STAGING_BYTES", 64 << 10)


def on_gpu_equal(got, want) -> bool:
    return got.keys() == want.keys() and all(t.device == GPU and same(t, want[k]) for k, t in got.items())


@pytest.mark.parametrize("spec", ls.DTYPES, ids=lambda d: d.name)
def test_every_dtype_arrives_bit_exact(tmp_path, spec):
    dtype = getattr(torch, spec.name)
    ref = {"t": random_tensor(dtype, (33, 7)), "scalar": random_tensor(dtype, ()),
           "empty": random_tensor(dtype, (0, 3))}
    lst.save_file(ref, tmp_path / "t.lzy")
    assert on_gpu_equal(lst.load_file(tmp_path / "t.lzy", device="cuda:0"), ref)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_tensors_bigger_than_a_buffer_and_many_per_buffer(tmp_path, small_buffers, compression):
    g = torch.Generator().manual_seed(1)
    ref = {f"small.{i}": torch.randn(i + 1, 100, generator=g) for i in range(40)}  # 400 B .. 16 KiB each
    ref["big"] = torch.randn(1000, 1000, generator=g)  # 4 MB: 62 buffers' worth
    ref["bf16"] = torch.randn(300, 301, generator=g).to(torch.bfloat16)  # odd byte count
    lst.save_file(ref, tmp_path / "m.lzy", compression=compression)
    got = lst.load_file(tmp_path / "m.lzy", device=GPU)
    assert on_gpu_equal(got, ref)
    # the copies are complete when load_file returns: usable on another stream at once
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        total = got["big"].double().sum()
    other.synchronize()
    assert total.item() == pytest.approx(ref["big"].double().sum().item())


def test_selection_ties_and_safetensors_files(tmp_path, small_buffers):
    shared = torch.arange(5000, dtype=torch.float32)
    ref = {"a.weight": shared, "b.weight": shared, "c": torch.ones(3, dtype=torch.int64)}
    lst.save_file(ref, tmp_path / "t.lzy")
    got = lst.load_file(tmp_path / "t.lzy", device=0, keys=["a.weight", "b.weight"])
    assert got.keys() == {"a.weight", "b.weight"} and got["a.weight"] is got["b.weight"]
    assert same(got["a.weight"], shared) and got["a.weight"].device == GPU
    import safetensors.torch

    safetensors.torch.save_file({"x": torch.arange(7.0), "y": torch.zeros(2, 2)}, tmp_path / "s.safetensors")
    assert on_gpu_equal(lst.load_file(tmp_path / "s.safetensors", device="cuda:0"),
                        safetensors.torch.load_file(tmp_path / "s.safetensors"))


def test_load_model_onto_the_gpu_and_from_the_meta_device(tmp_path):
    torch.manual_seed(0)

    def build():
        return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))

    model = build()
    lst.save_model(model, tmp_path / "m.lzy", compression="zstd")
    want = model.state_dict()
    on_gpu = build().to(GPU)
    assert lst.load_model(on_gpu, tmp_path / "m.lzy", device="cuda:0") == (set(), [])
    assert on_gpu_equal(on_gpu.state_dict(), want)
    with torch.device("meta"):
        empty = build()
    lst.load_model(empty, tmp_path / "m.lzy", device="cuda:0")
    assert on_gpu_equal(empty.state_dict(), want)
    assert all(isinstance(p, torch.nn.Parameter) for p in empty.parameters())


def test_nested_state_keeps_parameters_and_numpy_leaves(tmp_path, small_buffers):
    w = torch.nn.Parameter(torch.randn(300, 70))
    state = {"model": {"w": w, "frozen": torch.arange(10000)}, "np": np.arange(4), "step": 3}
    ls.save(state, tmp_path / "s.lzy")
    got = ls.load(tmp_path / "s.lzy", map_location="cuda:0")
    assert isinstance(got["model"]["w"], torch.nn.Parameter) and got["model"]["w"].requires_grad
    assert got["model"]["w"].device == GPU and same(got["model"]["w"].detach(), w.detach())
    assert same(got["model"]["frozen"], state["model"]["frozen"]) and isinstance(got["np"], np.ndarray)


def test_safe_open_on_the_gpu(tmp_path):
    ref = {"w": torch.randn(40, 30), "b": torch.arange(9, dtype=torch.int16)}
    lst.save_file(ref, tmp_path / "t.lzy", compression="zstd")
    with ls.safe_open(tmp_path / "t.lzy", framework="pt", device="cuda:0") as f:
        assert on_gpu_equal({k: f.get_tensor(k) for k in f.keys()}, ref)
        part = f.get_slice("w")[3:9, ::2]
        assert part.device == GPU and same(part, ref["w"][3:9, ::2])


def test_saving_gpu_tensors_writes_their_values(tmp_path):
    ref = torch.randn(257, 3, device=GPU)
    lst.save_file({"w": ref.t(), "h": ref[::2].to(torch.float16)}, tmp_path / "g.lzy")  # non-contiguous too
    got = lst.load_file(tmp_path / "g.lzy")
    assert same(got["w"], ref.t().cpu().contiguous()) and same(got["h"], ref[::2].half().cpu())


def test_a_default_device_set_by_the_caller_changes_nothing(tmp_path):
    """Pinned buffers are host memory whatever torch.set_default_device says
    (safetensors' test_gpu_default_device found this)."""
    ref = {"w": torch.randn(100, 10)}
    lst.save_file(ref, tmp_path / "t.lzy")
    with torch.device("cuda:0"):
        assert lst.load_file(tmp_path / "t.lzy")["w"].device.type == "cpu"
        assert on_gpu_equal(lst.load_file(tmp_path / "t.lzy", device="cuda:0"), ref)
        state = {"w": torch.arange(1000.0)}  # made on the GPU by the default device
        mgr = ls.CheckpointManager(tmp_path / "ck")
        mgr.save_async(1, state).result(timeout=60)
        mgr.close()
    assert same(ls.load(mgr.path(1))["w"], torch.arange(1000.0))
