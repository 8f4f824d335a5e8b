"""Converters: torch zip files (only through torch.load(weights_only=True)),
.npz (never unpickled), and the command line's convert for each format."""

from __future__ import annotations

import os
import pickle
import zipfile

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore import cli
from lazystore.interop import convert

torch = pytest.importorskip("torch")


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_torch_state_dict_converts_bit_exactly(tmp_path):
    sd = {"w": torch.randn(4, 5), "b": torch.randn(5).to(torch.bfloat16), "n": torch.tensor(3),
          "h": torch.randn(2, 2).half()}
    torch.save(sd, tmp_path / "m.pt")
    convert.from_torch(tmp_path / "m.pt", tmp_path / "m.lzy", compression="zstd")
    back = ls.load(tmp_path / "m.lzy")
    assert set(back) == set(sd)
    for k, t in sd.items():
        assert back[k].dtype == t.dtype and torch.equal(back[k], t)


def test_torch_training_state_keeps_its_structure(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 2}
    torch.save(state, tmp_path / "ckpt.pth")
    assert cli.main(["convert", str(tmp_path / "ckpt.pth"), str(tmp_path / "ckpt.lzy")]) == 0
    back = ls.load(tmp_path / "ckpt.lzy")
    assert back["epoch"] == 2
    assert torch.equal(back["model"]["weight"], state["model"]["weight"])
    assert back["optimizer"]["param_groups"][0]["lr"] == state["optimizer"]["param_groups"][0]["lr"]
    assert torch.equal(back["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"])


class Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_runs_code_fails_and_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(2), "x": Evil(marker)}, path)  # a real torch zip with a hostile pickle
    assert zipfile.is_zipfile(path) and not marker.exists()
    with pytest.raises(ls.FormatError, match="weights_only"):
        convert.from_torch(path, tmp_path / "out.lzy")
    assert cli.main(["convert", str(path), str(tmp_path / "out.lzy")]) == 2
    assert "weights_only" in capsys.readouterr().err
    assert not marker.exists() and not (tmp_path / "out.lzy").exists()


def test_legacy_torch_pickles_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "legacy.bin"
    path.write_bytes(pickle.dumps(Evil(marker), protocol=2))
    with pytest.raises(ls.FormatError, match="not a torch zip"):
        convert.from_torch(path, tmp_path / "out.lzy")
    assert cli.main(["convert", str(path), str(tmp_path / "out.lzy")]) == 2
    assert not marker.exists()


def test_npz_converts_bit_exactly(tmp_path):
    arrays = {"a": np.arange(10, dtype=np.int16), "b": np.asfortranarray(np.random.rand(3, 4)),
              "c": np.array(True), "d": np.zeros((0, 2), np.float32)}
    np.savez_compressed(tmp_path / "z.npz", **arrays)
    convert.from_npz(tmp_path / "z.npz", tmp_path / "z.lzy")
    back = ls.load(tmp_path / "z.lzy")
    assert set(back) == set(arrays)
    for k, a in arrays.items():
        assert same(back[k], np.asarray(a, order="C")), k


def test_npz_with_objects_is_refused_unpickled(tmp_path):
    np.savez(tmp_path / "o.npz", ok=np.ones(2), obj=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ls.FormatError, match="never unpickles"):
        convert.from_npz(tmp_path / "o.npz", tmp_path / "o.lzy")
    assert not (tmp_path / "o.lzy").exists()


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_converts_every_way(capsys, tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"w": rng.standard_normal((64, 32)).astype(np.float32),
               "bf": rng.standard_normal(16).astype(ml_dtypes.bfloat16), "s": np.array(4, np.int64)}
    ls.save(tensors, tmp_path / "a.lzy", compression="zstd", metadata={"step": 4})
    assert run(capsys, "convert", tmp_path / "a.lzy", tmp_path / "b.safetensors")[0] == 0
    assert run(capsys, "convert", tmp_path / "b.safetensors", tmp_path / "c.lzy", "--compression", "zstd")[0] == 0
    code, out, _ = run(capsys, "diff", tmp_path / "a.lzy", tmp_path / "c.lzy")
    assert code == 0 and out.startswith("same")
    code, out, _ = run(capsys, "verify", tmp_path / "b.safetensors")
    assert code == 0 and "OK" in out
    code, out, _ = run(capsys, "info", tmp_path / "b.safetensors")
    assert code == 0 and "safetensors" in out
    np.savez(tmp_path / "z.npz", **{k: v for k, v in tensors.items() if k != "bf"})
    assert run(capsys, "convert", tmp_path / "z.npz", tmp_path / "z.lzy")[0] == 0
    torch.save({k: torch.from_numpy(v) for k, v in tensors.items() if k != "bf"}, tmp_path / "t.bin")
    assert run(capsys, "convert", tmp_path / "t.bin", tmp_path / "t.lzy")[0] == 0
    assert same(ls.load(tmp_path / "z.lzy")["w"], tensors["w"])
    assert torch.equal(ls.load(tmp_path / "t.lzy")["w"], torch.from_numpy(tensors["w"]))
    # A plain safetensors file cannot be verified: said on one line, exit 2.
    import safetensors.numpy as stnp

    stnp.save_file({"w": tensors["w"]}, str(tmp_path / "plain.safetensors"))
    code, _, err = run(capsys, "verify", tmp_path / "plain.safetensors")
    assert code == 2 and "no lazystore checksums" in err and len(err.strip().splitlines()) == 1
