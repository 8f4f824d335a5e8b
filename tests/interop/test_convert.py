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
from lazystore._native.base_ref import BASE_KEY
from lazystore.interop import convert
from tests.cli.helpers import flip_byte

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


@pytest.mark.slow
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


@pytest.mark.slow
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


# -- delta files (formats 1.2, 1.3, docs/format.md §9.3) convert to standalone files -----------------


def _delta_file(folder):
    """base.lzy and d.lzy, a delta file against it; the tensors d.lzy holds."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((128, 64)).astype(np.float32)
    ls.save({"w": w, "same": np.arange(300, dtype=np.int32)}, folder / "base.lzy", compression="zstd",
            metadata={"step": 1})
    later = {"w": w.copy(), "same": np.arange(300, dtype=np.int32), "new": np.ones(5, np.float16)}
    later["w"][:3] += np.float32(1e-3)
    ls.save(later, folder / "d.lzy", base=folder / "base.lzy", metadata={"step": 2})
    with ls.open(folder / "d.lzy") as ck:
        assert ck.info("w").compression == "delta" and ck.info("same").compression == "delta"
        assert ck.format_version[:2] == (1, 3)
    return later


CONVERSIONS = {
    "to_lazystore": lambda src, dst: convert.to_lazystore(src, dst),
    "to_lazystore-zstd": lambda src, dst: convert.to_lazystore(src, dst, compression="zstd"),
    "to_safetensors": lambda src, dst: convert.to_safetensors(src, dst.with_suffix(".safetensors")),
    "cli-convert": lambda src, dst: cli.main(["convert", str(src), str(dst)]),
    "cli-convert-zstd": lambda src, dst: cli.main(["convert", str(src), str(dst), "--compression", "zstd"]),
    "cli-convert-none": lambda src, dst: cli.main(["convert", str(src), str(dst), "--compression", "none"]),
    "cli-convert-sharded": lambda src, dst: cli.main(["convert", str(src), str(dst), "--max-shard-size", "1MB"]),
    "cli-merge": lambda src, dst: cli.main(["merge", str(dst), str(src)]),
}


@pytest.mark.parametrize("how", CONVERSIONS)
def test_a_converted_delta_file_stands_alone(tmp_path, how):
    src_dir, out_dir = tmp_path / "series", tmp_path / "elsewhere"
    src_dir.mkdir(), out_dir.mkdir()
    tensors = _delta_file(src_dir)
    dst = out_dir / "out.lzy"
    assert CONVERSIONS[how](src_dir / "d.lzy", dst) in (None, 0)
    (src_dir / "base.lzy").unlink()  # the output must not need it
    dst = dst if dst.exists() else dst.with_suffix(".safetensors")
    with ls.open(dst, verify=True) as ck:
        assert BASE_KEY not in ck.system_metadata  # §9.3: only a file with delta tensors names a base
        assert ck.metadata == {"step": 2}
        codecs = {ck.info(n).compression for n in ck}
        assert "delta" not in codecs and ck.verify() == []
        if how.endswith("none"):
            assert codecs == {None}
        elif how.endswith("zstd"):
            assert "zstd" in codecs
    back = ls.load(dst)
    assert set(back) == set(tensors) and all(same(back[k], tensors[k]) for k in tensors)


def test_a_delta_tensor_converts_to_zstd_by_default(tmp_path):
    _delta_file(tmp_path)
    convert.to_lazystore(tmp_path / "d.lzy", tmp_path / "out.lzy")
    with ls.open(tmp_path / "out.lzy") as ck:
        # "same" (0..299, int32) compresses well, so it stays zstd; raw "new" stays raw.
        assert ck.info("same").compression == "zstd" and ck.info("new").compression is None
        assert ck.format_version[:2] < (1, 2)


# -- a conversion never turns unchecked bytes into a file with fresh checksums ------------------------


def _damaged(folder, monkeypatch, big: bool):
    """d.lzy holding raw "t" with one byte flipped, and "ok"; ``big`` makes
    "t" go through copy's block path."""
    if big:
        monkeypatch.setattr(convert, "COPY_BLOCK_BYTES", 4096)
    t = np.arange(64 * 256, dtype=np.float32).reshape(64, 256)  # 64 KiB, raw
    ls.save({"ok": np.ones(8, np.int64), "t": t}, folder / "d.lzy")
    with ls.open(folder / "d.lzy") as ck:
        flip_byte(folder / "d.lzy", ck.info("t").offset + 40_000)


DAMAGED_CONVERSIONS = {
    "to_lazystore": lambda src, dst: convert.to_lazystore(src, dst),
    "to_lazystore-zstd": lambda src, dst: convert.to_lazystore(src, dst, compression="zstd"),
    "to_safetensors": lambda src, dst: convert.to_safetensors(src, dst),
    # A view the caller opened without verify=True: its reads check nothing.
    "to_lazystore-open-view": lambda src, dst: convert.to_lazystore(ls.open(src), dst),
    "to_safetensors-open-view": lambda src, dst: convert.to_safetensors(ls.open(src), dst),
    "copy-open-view": lambda src, dst: _copy_into(ls.open(src), dst),
}


def _copy_into(view, dst):
    with view, ls.Writer(dst) as w:
        convert.copy(view, w)


@pytest.mark.parametrize("big", [False, True], ids=["whole", "blocks"])
@pytest.mark.parametrize("how", DAMAGED_CONVERSIONS)
def test_converting_a_damaged_file_raises_and_writes_nothing(tmp_path, monkeypatch, how, big):
    _damaged(tmp_path, monkeypatch, big)
    with pytest.raises(ls.ChecksumError, match="'t'"):
        DAMAGED_CONVERSIONS[how](tmp_path / "d.lzy", tmp_path / "out.lzy")
    assert sorted(os.listdir(tmp_path)) == ["d.lzy"]  # no output, no temporary file


@pytest.mark.parametrize("command", ["convert", "merge"])
def test_cli_refuses_to_copy_a_damaged_file(tmp_path, monkeypatch, capsys, command):
    _damaged(tmp_path, monkeypatch, big=True)
    src, dst = tmp_path / "d.lzy", tmp_path / "out.lzy"
    argv = [command, src, dst] if command == "convert" else [command, dst, src]
    code, _, err = run(capsys, *argv)
    assert code == 2 and "checksum mismatch in tensor 't'" in err and str(src) in err
    assert sorted(os.listdir(tmp_path)) == ["d.lzy"]


@pytest.mark.slow
def test_a_damaged_base_stops_the_conversion_of_its_delta_file(tmp_path):
    _delta_file(tmp_path)
    convert.to_lazystore(tmp_path / "base.lzy", tmp_path / "raw-base.lzy", compression="none")
    later = ls.load(tmp_path / "d.lzy")
    ls.save(later, tmp_path / "d2.lzy", base=tmp_path / "raw-base.lzy")  # delta against a raw base
    with ls.open(tmp_path / "raw-base.lzy") as ck:
        flip_byte(tmp_path / "raw-base.lzy", ck.info("w").offset + 5)
    for attempt in (lambda: convert.to_lazystore(tmp_path / "d2.lzy", tmp_path / "out.lzy"),
                    lambda: convert.to_lazystore(ls.open(tmp_path / "d2.lzy"), tmp_path / "out.lzy")):
        with pytest.raises(ls.ChecksumError):
            attempt()
        assert not (tmp_path / "out.lzy").exists()
