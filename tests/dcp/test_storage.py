"""LazyStoreReader and bytes items: DCP's planner unpickles them, so the reader
decides whether any reach it (lazystore/dcp/storage.py).

A hostile checkpoint is made the way an attacker would: a real one saved by
LazyStoreWriter, its metadata rewritten so that a tensor is a "bytes" item,
and its rank file rewritten so that the item holds a pickle that would create
a marker folder when unpickled.
"""

import os
import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException

import lazystore as ls
from lazystore.dcp import METADATA_FILE, LazyStoreReader, LazyStoreWriter, rank_file
from lazystore.dcp.metadata import DCP_KEY

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class _MakesFolder:
    """Unpickling this creates a folder: the stand-in for running any code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _save(folder, state):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=LazyStoreWriter(folder), no_dist=True)


def _load(folder, state, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=LazyStoreReader(folder, **options), no_dist=True)
    return state


def _failure(exc_info):
    (error, _trace), = exc_info.value.failures.values()
    return error


def _mark_as_bytes(folder, fqn: str, payload: bytes) -> None:
    """Rewrite a saved checkpoint so that the tensor ``fqn`` is a bytes item holding ``payload``."""
    with ls.open(folder / METADATA_FILE) as ck:
        doc = ck.system_metadata[DCP_KEY]
    with ls.open(folder / rank_file(0)) as ck:
        tag = ck.system_metadata[DCP_KEY]
        items = {k: np.array(ck[k]) for k in ck}
    doc["state_dict"][fqn] = {"type": "bytes"}
    for entry in doc["storage"]:
        if entry["fqn"] == fqn:
            entry.update(offset=None, index=None, key=fqn)
    items[fqn] = np.frombuffer(payload, np.uint8)
    with ls.Writer(folder / rank_file(0)) as w:
        w.system_metadata[DCP_KEY] = tag
        for k, v in items.items():
            w.add(k, v)
    with ls.Writer(folder / METADATA_FILE) as w:
        w.system_metadata[DCP_KEY] = doc


@pytest.fixture
def hostile(tmp_path):
    folder = tmp_path / "ck"
    _save(folder, {"w": torch.ones(2, 3), "b": torch.zeros(4)})
    marker = tmp_path / "code-ran"
    _mark_as_bytes(folder, "w", pickle.dumps(_MakesFolder(marker)))
    return folder, marker


@pytest.mark.parametrize("allow_pickle", [False, True])
def test_a_tensor_the_checkpoint_marks_as_bytes_is_never_unpickled(hostile, allow_pickle):
    folder, marker = hostile
    state = {"w": torch.full((2, 3), 7.0), "b": torch.full((4,), 7.0)}
    with pytest.raises(CheckpointException) as exc_info:
        _load(folder, state, allow_pickle=allow_pickle)
    error = _failure(exc_info)
    assert isinstance(error, ls.FormatError)
    assert "'w'" in str(error) and "tensor" in str(error) and str(folder) in str(error)
    assert not marker.exists()
    # refused before any item was served: the caller's tensors are untouched
    assert torch.equal(state["w"], torch.full((2, 3), 7.0)) and torch.equal(state["b"], torch.full((4,), 7.0))


def test_a_bytes_item_needs_the_callers_opt_in(hostile):
    folder, marker = hostile
    with pytest.raises(CheckpointException) as exc_info:
        _load(folder, {"w": 0, "b": torch.zeros(4)})  # the caller holds no tensor at "w"
    error = _failure(exc_info)
    assert isinstance(error, ls.InvalidInputError)
    assert "allow_pickle=True" in str(error) and "'w'" in str(error)
    assert not marker.exists()
    with pytest.raises(CheckpointException):  # opted in: DCP unpickles it, as the caller allowed
        _load(folder, {"w": 0, "b": torch.zeros(4)}, allow_pickle=True)
    assert marker.exists()


def test_non_tensor_items_load_with_the_opt_in_and_are_refused_without(tmp_path):
    saved = {"w": torch.arange(6.0).reshape(2, 3), "step": 42, "extra": {"lr": 0.1, "name": "adamw"}}
    _save(tmp_path / "ck", saved)

    def empty():
        return {"w": torch.zeros(2, 3), "step": 0, "extra": {"lr": 0.0, "name": ""}}

    with pytest.raises(CheckpointException) as exc_info:
        _load(tmp_path / "ck", empty())
    error = _failure(exc_info)
    assert isinstance(error, ls.InvalidInputError) and "allow_pickle=True" in str(error)
    assert "'step'" in str(error) and "'extra.lr'" in str(error)

    loaded = _load(tmp_path / "ck", empty(), allow_pickle=True)
    assert torch.equal(loaded["w"], saved["w"]) and loaded["step"] == 42 and loaded["extra"] == saved["extra"]

    tensors_only = _load(tmp_path / "ck", {"w": torch.zeros(2, 3)})  # no bytes item planned: no opt-in needed
    assert torch.equal(tensors_only["w"], saved["w"])


def test_loading_a_whole_checkpoint_without_a_state_dict_needs_the_opt_in(tmp_path):
    # DCP's loader without a state dict (its planner builds one from the metadata;
    # dcp_to_torch_save works the same way).
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    _save(tmp_path / "ck", {"w": torch.ones(3), "step": 5})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointException) as exc_info:
            _load_state_dict_from_keys(storage_reader=LazyStoreReader(tmp_path / "ck"))
        assert isinstance(_failure(exc_info), ls.InvalidInputError)
        out = _load_state_dict_from_keys(storage_reader=LazyStoreReader(tmp_path / "ck", allow_pickle=True))
    assert out["step"] == 5 and torch.equal(out["w"], torch.ones(3))


@pytest.mark.slow
def test_metadata_over_the_json_bounds_is_refused_on_save_and_on_load(tmp_path, monkeypatch):
    # The DCP document is metadata.lzy's metadata, bounded as every file's is
    # (docs/format.md §11.6; the bound shrunk here).
    from lazystore._core import strict_json

    state = {f"layer{i}.w": torch.zeros(2) for i in range(30)}  # ~47 JSON values per tensor
    _save(tmp_path / "ok", state)
    monkeypatch.setattr(strict_json, "MAX_VALUES", 1000)
    with pytest.raises(CheckpointException) as exc_info:
        _save(tmp_path / "big", state)
    assert isinstance(_failure(exc_info), ls.InvalidInputError) and "JSON values" in str(_failure(exc_info))
    assert not (tmp_path / "big" / METADATA_FILE).exists()  # no checkpoint that looks complete
    with pytest.raises(ls.FormatError, match="metadata too large to read"):
        LazyStoreReader(tmp_path / "ok").read_metadata()
    with pytest.raises(CheckpointException) as exc_info:
        _load(tmp_path / "ok", {k: torch.ones(2) for k in state})
    assert "metadata too large to read" in str(_failure(exc_info))  # DCP re-raises it in its own words
