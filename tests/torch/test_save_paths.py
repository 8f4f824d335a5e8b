"""Issue #25: one state_dict, one meaning, whichever way it was saved, and
the extension deciding the format, in Python as on the command line.

A flat dict of names to torch tensors is a flat checkpoint marked as torch
(``{"format": "pt"}`` in a safetensors file, for other tools) whether ``ls.save``, ``lazystore.torch.save_file`` or a
conversion wrote it; ``ls.load`` gives torch tensors for it, so
``model.load_state_dict(ls.load(p))`` works; ``merge`` and ``diff`` see the
same tensors; a ``.safetensors`` name gets a genuine safetensors file."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors
import safetensors.torch as st
import torch

import lazystore as ls
import lazystore.torch as lst
from lazystore.views.tree import TREE_KEY, flatten
from tests.cli.helpers import run


class Tied(torch.nn.Module):
    """Embedding and head sharing one weight, and a BatchNorm (buffers, an int counter)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.BatchNorm1d(6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight


def model() -> Tied:
    torch.manual_seed(0)
    m = Tied()
    with torch.no_grad():
        m.norm.running_mean.uniform_()
        m.norm.num_batches_tracked += 3
    return m


def fresh() -> Tied:
    torch.manual_seed(1)
    return Tied()


def write_old_style(sd, path):
    """A state_dict file as lazystore wrote it before issue #25: the flat
    dict wrapped in a nested-state tree."""
    structure, leaves = flatten(sd)
    with ls.Writer(path) as w:
        w.system_metadata[TREE_KEY] = structure
        for name, t in leaves.items():
            w.add(name, t.numpy())


def save_paths(tmp_path, capsys) -> dict:
    """The same state_dict saved every way there is."""
    sd = model().state_dict()
    paths = {}

    def saved(label, name, how):
        paths[label] = tmp_path / name
        how(paths[label])

    saved("ls.save", "a.lzy", lambda p: ls.save(sd, p))
    saved("ls.save .safetensors", "a.safetensors", lambda p: ls.save(sd, p))
    saved("save_file", "b.lzy", lambda p: lst.save_file(sd, p))
    saved("save_file .safetensors", "b.safetensors", lambda p: lst.save_file(sd, p))
    for ext in ("pt", "bin"):
        torch.save(sd, tmp_path / f"in.{ext}")
        saved(f"convert .{ext}", f"from-{ext}.lzy",
              lambda p, ext=ext: run(capsys, "convert", tmp_path / f"in.{ext}", p))
    # as transformers writes it: ties broken (safetensors refuses shared memory), format "pt"
    st.save_file({k: v.clone() for k, v in sd.items()}, tmp_path / "hf.safetensors", metadata={"format": "pt"})
    saved("convert .safetensors", "from-st.lzy", lambda p: run(capsys, "convert", tmp_path / "hf.safetensors", p))
    return paths


def test_a_state_dict_loads_into_its_model_from_every_save_path(tmp_path, capsys):
    want = model().state_dict()
    for label, path in save_paths(tmp_path, capsys).items():
        loaded = ls.load(path)
        assert all(isinstance(t, torch.Tensor) for t in loaded.values()), label
        m = fresh()
        m.load_state_dict(loaded)  # strict: every name, tied head included
        for name, t in m.state_dict().items():
            assert torch.equal(t, want[name]), (label, name)
        assert TREE_KEY not in ls.open(path).system_metadata, label


def test_ls_load_places_a_flat_torch_checkpoint_and_selects_with_keys(tmp_path):
    sd = model().state_dict()
    ls.save(sd, tmp_path / "a.lzy")
    on_meta = ls.load(tmp_path / "a.lzy", map_location="meta")
    assert {t.device.type for t in on_meta.values()} == {"meta"}
    head = ls.load(tmp_path / "a.lzy", keys="head.*")
    assert list(head) == ["head.weight"] and torch.equal(head["head.weight"], sd["embed.weight"])


def test_tied_tensors_are_stored_once_in_a_lazystore_file_and_whole_in_safetensors(tmp_path):
    sd = model().state_dict()
    ls.save(sd, tmp_path / "a.lzy")
    ls.save(sd, tmp_path / "a.safetensors")
    assert "head.weight" not in ls.open(tmp_path / "a.lzy")  # an alias record, as save_file writes
    loaded = ls.load(tmp_path / "a.lzy")
    assert loaded["head.weight"] is loaded["embed.weight"]
    assert "head.weight" in st.load_file(tmp_path / "a.safetensors")


def test_nested_state_and_mixed_dicts_stay_nested(tmp_path):
    sd = model().state_dict()
    state = {"model": sd, "step": 3}
    ls.save(state, tmp_path / "n.lzy")
    assert TREE_KEY in ls.open(tmp_path / "n.lzy").system_metadata
    back = ls.load(tmp_path / "n.lzy")
    assert back["step"] == 3 and torch.equal(back["model"]["norm.running_mean"], sd["norm.running_mean"])
    mixed = {"w": torch.ones(2), "n": np.zeros(3)}
    ls.save(mixed, tmp_path / "m.lzy")
    back = ls.load(tmp_path / "m.lzy")
    assert isinstance(back["w"], torch.Tensor) and isinstance(back["n"], np.ndarray)


def test_a_numpy_dict_stays_numpy_and_the_users_metadata_stays_theirs(tmp_path):
    ls.save({"x": np.arange(3)}, tmp_path / "n.lzy")
    assert isinstance(ls.load(tmp_path / "n.lzy")["x"], np.ndarray)
    for name in ("t.lzy", "t.safetensors"):
        lst.save_file({"x": torch.arange(3)}, tmp_path / name)
        assert ls.open(tmp_path / name).metadata == {}  # lazystore's mark is its own
        with lst.safe_open(tmp_path / name) as f:
            assert f.metadata() is None
    with safetensors.safe_open(tmp_path / "t.safetensors", framework="pt") as f:
        assert f.metadata()["format"] == "pt"  # for other tools
    ls.save({"x": torch.arange(3)}, tmp_path / "u.safetensors", metadata={"format": "mine"})
    assert ls.open(tmp_path / "u.safetensors").metadata == {"format": "mine"}
    assert isinstance(ls.load(tmp_path / "u.safetensors")["x"], torch.Tensor)


def test_an_older_state_dict_file_loads_as_before(tmp_path):
    sd = model().state_dict()
    write_old_style(sd, tmp_path / "old.lzy")
    back = ls.load(tmp_path / "old.lzy")
    assert type(back) is type(sd) and back._metadata == sd._metadata  # the tree's OrderedDict, as before
    fresh().load_state_dict(back)


# -- merge and diff ---------------------------------------------------------------------


def test_diff_calls_every_save_of_one_state_dict_the_same(tmp_path, capsys):
    paths = save_paths(tmp_path, capsys)
    write_old_style(model().state_dict(), tmp_path / "old.lzy")
    # safetensors holds the tied head whole: compare files that tie alike
    tied = [paths["ls.save"], paths["save_file"], paths["convert .pt"], paths["convert .bin"]]
    untied = [paths["ls.save .safetensors"], paths["save_file .safetensors"], paths["convert .safetensors"],
              tmp_path / "old.lzy"]
    for group in (tied, untied):
        for other in group[1:]:
            code, out, _ = run(capsys, "diff", group[0], other)
            assert code == 0 and out.startswith("same:"), (group[0].name, other.name, out)


def test_diff_still_reports_a_change(tmp_path, capsys):
    sd = model().state_dict()
    ls.save(sd, tmp_path / "a.lzy")
    sd["norm.running_var"] = sd["norm.running_var"] + 1
    ls.save(sd, tmp_path / "b.safetensors")
    code, out, _ = run(capsys, "diff", tmp_path / "a.lzy", tmp_path / "b.safetensors")
    assert code == 1 and "~ norm.running_var  values:" in out


def test_merge_takes_flat_torch_files_however_saved(tmp_path, capsys):
    sd = model().state_dict()
    first = {k: v for k, v in sd.items() if k.startswith("norm.")}
    rest = {k: v.clone() for k, v in sd.items() if not k.startswith("norm.")}
    ls.save(first, tmp_path / "a.lzy")
    write_old_style(rest, tmp_path / "b.lzy")
    code, _, err = run(capsys, "merge", tmp_path / "m.safetensors", tmp_path / "a.lzy", tmp_path / "b.lzy")
    assert code == 0, err
    fresh().load_state_dict(ls.load(tmp_path / "m.safetensors"))
    assert st.load_file(tmp_path / "m.safetensors").keys() == sd.keys()


# -- the extension decides the format -----------------------------------------------------


def test_a_safetensors_name_gets_a_safetensors_file_that_is_checked(tmp_path):
    sd = model().state_dict()
    path = tmp_path / "m.safetensors"
    lst.save_file(sd, path, metadata={"run": "7"})
    with safetensors.safe_open(path, framework="pt") as f:
        assert f.metadata()["format"] == "pt" and f.metadata()["run"] == "7"
        assert set(f.keys()) == set(sd)
    assert ls.open(path).verify() == []
    with open(path, "r+b") as f:  # damage the last byte of the data
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(ls.ChecksumError):
        ls.load(path)


@pytest.mark.parametrize("call", [
    lambda p: ls.save({"model": {"w": torch.ones(2)}}, p),
    lambda p: ls.save({"w": torch.ones(2)}, p, compression="zstd"),
    lambda p: lst.save_file({"w": torch.ones(2)}, p, compression="zstd"),
    lambda p: ls.save({"w": np.ones(2)}, p, chunk_bytes=1 << 20),
    lambda p: ls.save({"w": torch.nn.Parameter(torch.ones(2))}, p),
], ids=["nested", "compressed", "save_file compressed", "layout option", "parameter"])
def test_what_safetensors_cannot_hold_is_refused_pointing_at_lzy(tmp_path, call):
    path = tmp_path / "x.safetensors"
    with pytest.raises(ls.InvalidInputError, match=r"\.lzy"):
        call(path)
    assert not path.exists()


@pytest.mark.parametrize("name", ["x.pt", "x.PTH", "x.bin", "x.npz"])
def test_names_of_formats_lazystore_does_not_write_are_refused(tmp_path, name):
    with pytest.raises(ls.InvalidInputError, match=r"does not write.*\.lzy"):
        ls.save({"w": torch.ones(2)}, tmp_path / name)
    with pytest.raises(ls.InvalidInputError, match=r"does not write"):
        lst.save_file({"w": torch.ones(2)}, tmp_path / name)
    assert not (tmp_path / name).exists()


def test_other_names_get_a_lazystore_file(tmp_path):
    for name in ("x.lzy", "x.ckpt", "x"):
        ls.save({"w": torch.ones(2)}, tmp_path / name)
        assert ls.open(tmp_path / name).format == "lazystore"


def test_a_manager_saves_a_state_dict_flat_and_restores_torch_tensors(tmp_path):
    sd = model().state_dict()
    with ls.CheckpointManager(tmp_path / "ckpts") as mgr:
        path = mgr.save(1, sd)
        assert TREE_KEY not in ls.open(path).system_metadata
        fresh().load_state_dict(mgr.restore())
