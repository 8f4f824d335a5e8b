"""ls.open of a file that is no checkpoint says what it looks like and how
to convert it: torch files and .npz archives are read for conversion only,
never opened (nothing is unpickled by ls.open)."""

from __future__ import annotations

import pickle
import zipfile

import numpy as np
import pytest

import lazystore as ls
from lazystore import cli


def refusal(path) -> str:
    with pytest.raises(ls.FormatError, match="not a lazystore or safetensors file") as info:
        ls.open(path)
    message = str(info.value)
    assert str(path) in message
    with pytest.raises(ls.FormatError) as loaded:  # ls.load opens the same way
        ls.load(path)
    assert str(loaded.value) == message
    return message


def test_a_torch_file_points_at_the_converters(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    path = tmp_path / "x.pt"
    torch.save({"model": torch.nn.Linear(3, 2).state_dict(), "step": 4}, path)
    message = refusal(path)
    assert "torch checkpoint" in message
    assert f"lazystore convert {path} out.lzy" in message and "lazystore.interop.from_torch" in message
    # What the message says works, and `lazystore info` reads the file as it did.
    assert cli.main(["convert", str(path), str(tmp_path / "out.lzy")]) == 0
    assert ls.load(tmp_path / "out.lzy")["step"] == 4
    assert cli.main(["info", str(path)]) == 0
    assert "nested state: yes" in capsys.readouterr().out


def test_a_pytorch_model_bin_is_a_torch_file_whatever_its_name(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(2)}, path)
    assert "lazystore.interop.from_torch" in refusal(path)


def test_a_legacy_torch_pickle_says_how_to_load_it_safely(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "old.pt"
    torch.save({"w": torch.ones(2)}, path, _use_new_zipfile_serialization=False)
    message = refusal(path)
    assert "legacy" in message and "weights_only=True" in message


def test_a_plain_pickle_is_told_apart_without_unpickling(tmp_path):
    path = tmp_path / "state.pkl"
    path.write_bytes(pickle.dumps({"w": [1, 2, 3]}, protocol=4))
    assert "a pickle" in refusal(path)


def test_an_npz_archive_points_at_from_npz(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, a=np.arange(3), b=np.ones(2))
    message = refusal(path)
    assert ".npz archive" in message and "lazystore.interop.from_npz" in message
    assert cli.main(["convert", str(path), str(tmp_path / "arrays.lzy")]) == 0


def test_another_zip_is_a_zip(tmp_path):
    path = tmp_path / "notes.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("notes.txt", "hello")
    message = refusal(path)
    assert "a zip archive" in message and "hello" not in message and "notes.txt" not in message


def test_a_file_cut_inside_a_zip_header_is_unknown_not_an_error_of_ours(tmp_path):
    path = tmp_path / "cut.zip"
    path.write_bytes(b"PK\x03\x04" + b"\x00" * 10)
    assert "a zip archive" in refusal(path)
