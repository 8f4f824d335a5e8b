"""Integrity by default: every path that hands back whole tensors checks the
raw bytes it returns against their checksums, unless told not to.

A flipped byte inside a raw tensor's data passes ``ls.open`` (the index is
intact) and would pass a zero-copy read; each loading path must raise
ChecksumError naming the tensor, and each must return the stored bytes, as
they are, with ``verify=False``. Zero-copy lazy access (``ck[name]``,
``get_slice``) stays unchecked unless the file is opened with
``verify=True``.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls

W = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
Z = (np.arange(4096, dtype=np.int32) % 7).reshape(64, 64)
FLIP_AT = 1000  # bytes into tensor "w": element 250, row 3


def _flip(path, name, at=FLIP_AT, view_path=None) -> None:
    with ls.open(view_path or path) as ck:
        offset = ck.info(name).offset + at
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x40]))


def _flip_leaf_w(path):
    """Flip a byte of the tensor leaf ``.../w`` of a nested checkpoint; a
    ``pytest.raises`` for the ChecksumError that must name it."""
    with ls.open(path) as ck:
        name = next(n for n in ck if n.endswith("w"))
    _flip(path, name)
    return pytest.raises(ls.ChecksumError, match=repr(name))


def _flipped_w() -> np.ndarray:
    w = W.copy()
    w.view(np.uint8).reshape(-1)[FLIP_AT] ^= 0x40
    return w


@pytest.fixture
def damaged(tmp_path):
    """A flat file whose raw tensor "w" has one byte flipped; "z" is zstd."""
    path = tmp_path / "damaged.lzy"
    with ls.Writer(path, chunk_bytes=4096) as w:
        w.add("w", W)
        w.add("z", Z, compression="zstd")
    _flip(path, "w")
    return path


def _ck_load(path, **kw):
    with ls.open(path) as ck:
        return ck.load(**kw)


LOADERS = {
    "ls.load": lambda path, **kw: ls.load(path, **kw),
    "ck.load": _ck_load,
}


def _raises_naming_w(fn) -> None:
    with pytest.raises(ls.ChecksumError, match="'w' chunk 0"):
        fn()


@pytest.mark.parametrize("how", list(LOADERS))
def test_loads_check_raw_tensors_by_default(damaged, how):
    load = LOADERS[how]
    _raises_naming_w(lambda: load(damaged))
    _raises_naming_w(lambda: load(damaged, keys=["w"]))
    assert np.array_equal(load(damaged, keys=["z"])["z"], Z)  # an intact tensor alone loads
    out = load(damaged, verify=False)  # the opt-out hands back the stored bytes as they are
    assert out["w"].tobytes() == _flipped_w().tobytes() and np.array_equal(out["z"], Z)


def test_lazy_access_is_unchecked_unless_opened_with_verify(damaged):
    with ls.open(damaged) as ck:  # zero-copy: no check, by design
        assert ck["w"].tobytes() == _flipped_w().tobytes()
        assert np.array_equal(ck.get_slice("w")[3], _flipped_w()[3])
        assert ck.verify() == ["w"]
    with ls.open(damaged, verify=True) as ck:  # verify-on-access is a keyword away
        _raises_naming_w(lambda: ck["w"])
        _raises_naming_w(lambda: ck.get_slice("w")[3])
        _raises_naming_w(lambda: ck.load(verify=False))  # the view's own verify=True still holds


@pytest.mark.slow
def test_many_small_tensors_each_damage_named(tmp_path):
    # The load checks small tensors many to a pool task and splits big ones
    # across tasks: a flip anywhere is still named, with its chunk.
    path = tmp_path / "many.lzy"
    tensors = {f"t.{i:04d}": np.full(5, i, dtype=np.float32) for i in range(3000)}
    tensors["big"] = np.arange(3 << 20, dtype=np.float32)  # 12 MiB: 12 chunks of 1 MiB
    ls.save(tensors, path)
    assert ls.load(path)["t.2999"][0] == 2999
    _flip(path, "t.2345", at=7)
    with pytest.raises(ls.ChecksumError, match="'t.2345' chunk 0"):
        ls.load(path)
    assert ls.load(path, keys=["big", "t.0001"])["big"][-1] == (3 << 20) - 1
    _flip(path, "big", at=(11 << 20) + 5)
    with pytest.raises(ls.ChecksumError, match="'big' chunk 11"):
        ls.load(path, keys=["big"])


def test_nested_state_and_sharded_folders_load_checked(tmp_path):
    nested = tmp_path / "state.lzy"
    ls.save({"model": {"w": W}, "step": 3}, nested)
    with _flip_leaf_w(nested):
        ls.load(nested)
    assert ls.load(nested, verify=False)["step"] == 3

    folder = tmp_path / "sharded"
    ls.save({"a": Z, "w": W}, folder, max_shard_size=20_000)
    with ls.open(folder) as ck:
        shard = next(v for v in ck.shards if "w" in v)
        shard_path = shard.name
    _flip(shard_path, "w")
    _raises_naming_w(lambda: ls.load(folder))
    assert ls.load(folder, verify=False)["w"].tobytes() == _flipped_w().tobytes()


def test_safetensors_written_by_lazystore_load_checked(tmp_path):
    # Such a file carries its checksums in its header: loads check them too.
    from lazystore.interop import to_safetensors

    clean = tmp_path / "clean.lzy"
    ls.save({"w": W}, clean)
    path = tmp_path / "model.safetensors"
    to_safetensors(clean, path)
    assert np.array_equal(ls.load(path)["w"], W)
    _flip(path, "w")
    _raises_naming_w(lambda: ls.load(path))
    assert ls.load(path, verify=False)["w"].tobytes() == _flipped_w().tobytes()


def test_files_without_checksums_still_load(tmp_path):
    # A safetensors file lazystore did not write records no checksums: the
    # default cannot check it and does not refuse it (verify() says so).
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "plain.safetensors"
    safetensors_numpy.save_file({"w": W}, str(path))
    assert np.array_equal(ls.load(path)["w"], W)
    with ls.open(path) as ck, pytest.raises(ls.VerificationUnavailableError):
        ck.verify()


def test_restore_checks_by_default(tmp_path):
    with ls.CheckpointManager(tmp_path / "run") as manager:
        manager.save(1, {"model": {"w": W}})
        with _flip_leaf_w(manager.path(1)):
            manager.restore()
        # The opt-out reads the raw bytes as they are, flipped byte and all.
        assert np.array_equal(manager.restore(verify=False)["model"]["w"], _flipped_w())


# -- lazystore.torch ----------------------------------------------------------------


@pytest.fixture
def torch_damaged(tmp_path):
    torch = pytest.importorskip("torch")
    from lazystore.torch import save_file

    path = tmp_path / "model.lzy"
    save_file({"w": torch.from_numpy(W), "z": torch.from_numpy(Z)}, path, chunk_bytes=4096)
    clean = path.read_bytes()
    _flip(path, "w")
    return torch, path, clean


def test_torch_loads_check_by_default(torch_damaged):
    torch, path, _ = torch_damaged
    from lazystore.torch import load, load_file, load_model

    model = torch.nn.Module()
    model.register_buffer("w", torch.zeros(64, 64))
    model.register_buffer("z", torch.zeros(64, 64, dtype=torch.int32))
    _raises_naming_w(lambda: load_file(path))
    _raises_naming_w(lambda: load(path.read_bytes()))
    _raises_naming_w(lambda: load_model(model, path))
    assert not model.w.any() and not model.z.any()  # nothing was loaded into the model

    flipped = _flipped_w().tobytes()
    assert load_file(path, verify=False)["w"].numpy().tobytes() == flipped
    assert load(path.read_bytes(), verify=False)["w"].numpy().tobytes() == flipped
    assert load_model(model, path, verify=False) == (set(), [])
    assert model.w.numpy().tobytes() == flipped and np.array_equal(model.z.numpy(), Z)


def test_safe_open_get_tensor_checks_by_default_get_slice_does_not(torch_damaged):
    _, path, _ = torch_damaged
    from lazystore import safe_open

    flipped = _flipped_w()
    with safe_open(path, framework="pt") as f:
        _raises_naming_w(lambda: f.get_tensor("w"))
        _raises_naming_w(f.get_tensors)
        assert np.array_equal(f.get_tensor("z").numpy(), Z)
        assert f.get_tensor("w", verify=False).numpy().tobytes() == flipped.tobytes()
        assert np.array_equal(f.get_slice("w")[3].numpy(), flipped[3])  # lazy: unchecked
    with safe_open(path, framework="np") as f:
        _raises_naming_w(lambda: f.get_tensor("w"))


def test_lightning_load_checkpoint_checks_by_default(tmp_path):
    pytest.importorskip("lightning")
    from lazystore.lightning import LazyStoreCheckpointIO

    io = LazyStoreCheckpointIO()
    path = tmp_path / "epoch=0.ckpt"
    io.save_checkpoint({"state_dict": {"w": W}, "epoch": 0}, path)
    with _flip_leaf_w(path):
        io.load_checkpoint(path)


def test_lightning_load_from_checkpoint_checks_by_default(tmp_path):
    pytest.importorskip("lightning")
    import lightning as L
    import torch

    from lazystore.lightning import LazyStoreCheckpointIO, load_from_checkpoint

    class Holder(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(64, 64))

    path = tmp_path / "epoch=0.ckpt"
    LazyStoreCheckpointIO().save_checkpoint({"state_dict": {"w": torch.from_numpy(W)},
                                             "pytorch-lightning_version": "2.6.6"}, path)
    assert torch.equal(load_from_checkpoint(Holder, path).w, torch.from_numpy(W))
    with _flip_leaf_w(path):
        load_from_checkpoint(Holder, path)
