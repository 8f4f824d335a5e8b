"""lazystore.safe_open against safetensors' own safe_open: the same answers
over the same safetensors file, and the same interface over lazystore
files (raw and compressed) and sharded folders."""

from __future__ import annotations

import json

import numpy as np
import pytest
import safetensors
import safetensors.torch as st
import torch

import lazystore as ls
from lazystore.torch import save_file
from tests.torch.test_files import same, tensors

INDEXES = [(slice(None),), (slice(1, 3),), (0,), (slice(None, None, 2), slice(1, None)), (-1, 2),
           (slice(4, 1),), (Ellipsis, 0)]  # 4:1, not 5:1: a start past the end raises, as in safetensors


def two_d(t: torch.Tensor) -> bool:
    return t.ndim == 2 and t.numel() > 0


@pytest.fixture
def st_file(tmp_path):
    path = tmp_path / "ref.safetensors"
    st.save_file(tensors(), path, metadata={"format": "pt", "note": "hi"})
    return path


def test_same_answers_as_safetensors_over_its_file(st_file):
    with safetensors.safe_open(st_file, framework="pt") as theirs, ls.safe_open(st_file, framework="pt") as ours:
        names = theirs.keys()
        assert ours.keys() == names
        assert ours.offset_keys() == theirs.offset_keys()
        assert ours.metadata() == theirs.metadata()
        for name in names:
            assert same(ours.get_tensor(name), theirs.get_tensor(name)), name
            a, b = ours.get_slice(name), theirs.get_slice(name)
            assert (a.get_shape(), a.get_dtype()) == (b.get_shape(), b.get_dtype()), name
            if two_d(theirs.get_tensor(name)):
                for index in [(slice(1, 3),), (slice(None), slice(0, 2)), (0,)]:
                    assert same(a[index], b[index]), (name, index)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_lazystore_files(tmp_path, compression):
    ref = tensors()
    path = tmp_path / "t.lzy"
    save_file(ref, path, metadata={"format": "pt", "config": {"layers": 2}}, compression=compression,
              chunk_bytes=256)
    with ls.safe_open(path, framework="pt") as f:
        assert f.keys() == sorted(ref) and f.offset_keys() == list(ref)
        assert f.metadata() == {"format": "pt", "config": '{"layers":2}'}  # JSON values as their text
        assert json.loads(f.metadata()["config"]) == {"layers": 2}
        for name, t in ref.items():
            got = f.get_tensor(name)
            assert same(got, t) and got.device.type == "cpu", name
            s = f.get_slice(name)
            assert s.get_shape() == list(t.shape)
            if t.ndim == 2 and t.numel():
                for index in INDEXES:
                    assert same(s[index], t[index]), (name, index)
        assert f.get_slice("w_bf16").get_dtype() == "BF16" and f.get_slice("ids").get_dtype() == "I64"
        assert {k: same(v, ref[k]) for k, v in f.get_tensors().items()} == dict.fromkeys(ref, True)


def test_tensors_are_writable_and_never_written_back(tmp_path):
    path = tmp_path / "t.lzy"
    save_file({"w": torch.zeros(4, 4)}, path)
    before = path.read_bytes()
    with ls.safe_open(path, "pt") as f:
        f.get_tensor("w").add_(1)
        part = f.get_slice("w")[1:3]
        part.add_(1)  # a copy of what was asked for: the map is read-only
        assert f.get_tensor("w").sum().item() == 0
    assert path.read_bytes() == before


def test_numpy_framework(tmp_path):
    ref = {"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(2, np.int8)}
    ls.save(ref, tmp_path / "n.lzy")
    with ls.safe_open(tmp_path / "n.lzy", framework="np") as f:
        got = f.get_tensor("a")
        assert isinstance(got, np.ndarray) and got.flags.writeable and np.array_equal(got, ref["a"])
        assert np.array_equal(f.get_slice("a")[:, 1], ref["a"][:, 1])
        assert f.get_slice("b").get_dtype() == "I8" and f.metadata() is None
    with pytest.raises(ls.InvalidInputError, match="numpy arrays, which live on the CPU"):
        ls.safe_open(tmp_path / "n.lzy", framework="np", device="cuda:0")


def test_sharded_folders(tmp_path):
    ref = {f"layer{i}": torch.full((32, 32), float(i)) for i in range(5)}
    ls.save({k: v.numpy() for k, v in ref.items()}, tmp_path / "folder", max_shard_size=10_000,
            compression="zstd", metadata={"step": 3})
    with ls.safe_open(tmp_path / "folder", framework="pt") as f:
        assert f.keys() == sorted(ref) and f.metadata() == {"step": "3"}
        assert same(f.get_tensor("layer4"), ref["layer4"])
        assert same(f.get_slice("layer2")[3:5, ::4], ref["layer2"][3:5, ::4])


def test_aliases_are_names_too(tmp_path):
    emb = torch.randn(5, 3)
    save_file({"embed": emb, "head": emb}, tmp_path / "t.lzy")
    with ls.safe_open(tmp_path / "t.lzy", "pt") as f:
        assert f.keys() == ["embed", "head"]
        assert same(f.get_tensor("head"), emb) and same(f.get_slice("head")[1:2], emb[1:2])
        both = f.get_tensors()
        assert both["head"] is both["embed"]


def test_devices(tmp_path):
    save_file({"w": torch.ones(2, 2)}, tmp_path / "t.lzy")
    with ls.safe_open(tmp_path / "t.lzy", "pt", device="meta") as f:
        assert f.get_tensor("w").device.type == "meta" and f.get_slice("w")[0].device.type == "meta"
    with ls.safe_open(tmp_path / "t.lzy", "pt", device=torch.device("cpu")) as f:
        assert f.get_tensor("w").device.type == "cpu"
    if torch.cuda.is_available():  # pragma: no cover - CPU-only machines
        with ls.safe_open(tmp_path / "t.lzy", "pt", device=0) as f:
            assert f.get_tensor("w").device == torch.device("cuda:0")
    else:
        for device in ("cuda", "cuda:0", 0):
            with pytest.raises(ls.InvalidInputError, match="no cuda device is available"):
                ls.safe_open(tmp_path / "t.lzy", "pt", device=device)
    for device in ("gpu", 1.5, "cpu:x"):
        with pytest.raises(ls.InvalidInputError, match="device"):
            ls.safe_open(tmp_path / "t.lzy", "pt", device=device)


def test_bad_use(tmp_path):
    save_file({"w": torch.ones(2)}, tmp_path / "t.lzy")
    with pytest.raises(ls.InvalidInputError, match="framework must be one of"):
        ls.safe_open(tmp_path / "t.lzy", framework="tf")
    with pytest.raises(ls.InvalidInputError, match="backend"):
        ls.safe_open(tmp_path / "t.lzy", framework="pt", backend="other")
    with pytest.raises(FileNotFoundError):
        ls.safe_open(tmp_path / "missing.lzy", framework="pt")
    f = ls.safe_open(tmp_path / "t.lzy", framework="pt")
    s = f.get_slice("w")
    with pytest.raises(ls.TensorNotFoundError, match="nope"):
        f.get_tensor("nope")
    with pytest.raises(ls.InvalidSelectionError):
        s[[0, 1]]  # fancy indexing: safetensors refuses lists too
    f.__exit__(None, None, None)
    for call in (f.keys, f.metadata, lambda: f.get_tensor("w"), lambda: s[0]):
        with pytest.raises(ls.ClosedError):
            call()


@pytest.mark.slow
def test_numpy_framework_needs_no_torch(tmp_path):
    import subprocess
    import sys
    import textwrap

    ls.save({"a": np.arange(4, dtype=np.float32)}, tmp_path / "n.lzy")
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # as if PyTorch were not installed: "import torch" fails
        import lazystore as ls
        with ls.safe_open("n.lzy", framework="np") as f:
            assert f.get_tensor("a").tolist() == [0, 1, 2, 3] and f.get_slice("a").get_dtype() == "F32"
        from lazystore.torch import load_file
        try:
            load_file("n.lzy")
        except ls.MissingDependencyError as exc:
            from lazystore._core.distribution import DISTRIBUTION
            assert "lazystore.torch reads and writes PyTorch tensors" in str(exc)
            assert f"'{DISTRIBUTION}[torch]'" in str(exc), exc
        else:
            raise AssertionError("no MissingDependencyError")
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# Each index: what safetensors gives or refuses, compared below with its own answer.
SAFETENSORS_INDEXES = [slice(None, 20), (slice(None), slice(None, 20)), (slice(2, None), 20), (slice(2, None), -6),
                       slice(10, None), slice(11, None), (Ellipsis, slice(None, 9)), [], [0, 1],
                       slice(None), (), slice(2), (slice(None), slice(None, 2)), (0, slice(None, 2)),
                       (slice(2, None), -1), (slice(2, None), -5), (slice(9, 10),)]


@pytest.mark.parametrize("framework", ["pt", "np"])
def test_slices_raise_where_safetensors_raises(tmp_path, framework):
    a = torch.randn(10, 5)
    st.save_file({"a": a}, tmp_path / "ref.safetensors")
    save_file({"a": a}, tmp_path / "a.lzy", compression="zstd", chunk_bytes=64)
    # safetensors' rule is its numpy framework's (0.8.0's "pt" lets [10:] of 10 rows through).
    with safetensors.safe_open(tmp_path / "ref.safetensors", framework="np") as theirs:
        for path in (tmp_path / "ref.safetensors", tmp_path / "a.lzy"):
            with ls.safe_open(path, framework=framework) as ours:
                for index in SAFETENSORS_INDEXES:
                    try:
                        want = theirs.get_slice("a")[index]
                    except Exception as exc:  # noqa: BLE001 - safetensors' SafetensorError is an Exception
                        with pytest.raises(ls.InvalidSelectionError) as got:
                            ours.get_slice("a")[index]
                        assert str(got.value) == str(exc), index
                    else:
                        got = ours.get_slice("a")[index]
                        assert tuple(got.shape) == tuple(want.shape), index
                        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=str(index))
    with ls.safe_open(tmp_path / "a.lzy", framework=framework) as ours:  # what safetensors refuses, numpy's meaning
        assert np.asarray(ours.get_slice("a")[-3:, ::2]).tolist() == a[-3:, ::2].tolist()


def test_a_missing_file_as_safetensors_words_it(tmp_path):
    from lazystore.torch import load_file

    missing = str(tmp_path / "notafile")
    for ours, theirs in [(lambda: ls.safe_open(missing, framework="pt"), lambda: safetensors.safe_open(missing, "pt")),
                         (lambda: load_file(missing), lambda: st.load_file(missing))]:
        with pytest.raises(FileNotFoundError) as want:
            theirs()
        with pytest.raises(FileNotFoundError) as got:
            ours()
        assert str(got.value) == str(want.value) == f"No such file or directory: {missing}"
