"""lazystore.dcp.consolidate and ``lazystore convert DCP_FOLDER out.lzy``: one
lazystore file from a distributed checkpoint, lazystore's or torch's.

The multi-rank folders are the 2-process run's (tests/dcp/conftest.py): DTensors
sharded by rows (uneven: 67 rows on 2 ranks), by columns, replicated, bf16, so
every tensor but the replicated one is assembled from chunks in two rank files.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

import lazystore as ls
import lazystore.torch as lt
from lazystore.dcp import consolidate, rank_file
from lazystore.dcp.consolidate import ITEMS_KEY
from tests.cli.helpers import flip_byte
from tests.dcp import dcp_worker as worker
from tests.dcp.test_storage import _MakesFolder  # unpickling it makes a folder: running code
from tests.paths import REPO

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

WORKER_ITEMS = {"step": worker.STEP, **{f"extra.{k}": v for k, v in worker.EXTRA.items()}}


def _same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(worker.bits(a), worker.bits(b))


def _check_full(path) -> None:
    got = lt.load_file(path)
    full = worker.full_tensors()
    assert sorted(got) == sorted(full)
    for k, want in full.items():
        assert _same(got[k], want), k


@pytest.mark.slow
@pytest.mark.parametrize("name", ["raw", "zstd", "async", "torch"])
def test_a_two_rank_checkpoint_becomes_the_full_tensors_bit_for_bit(saved, tmp_path, name):
    files = os.listdir(saved / name)
    assert {rank_file(0), rank_file(1)} <= set(files) or {"__0_0.distcp", "__1_0.distcp"} <= set(files)
    out = tmp_path / "model.lzy"
    done = consolidate(saved / name, out)
    _check_full(out)
    assert done.tensors == len(worker.SHAPES) and done.items == WORKER_ITEMS and done.skipped == {}
    with ls.open(out) as ck:
        assert ck.metadata == {ITEMS_KEY: {k: list(v) if isinstance(v, tuple) else v for k, v in WORKER_ITEMS.items()}}
        assert ck.verify() == []


def test_torch_folder_matches_torchs_own_consolidation(saved, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(saved / "torch", tmp_path / "torch.pt")
    theirs = torch.load(tmp_path / "torch.pt", weights_only=False)  # the test's own file
    consolidate(saved / "torch", tmp_path / "ours.lzy", compression="zstd")
    ours = lt.load_file(tmp_path / "ours.lzy")
    assert sorted(ours) == sorted(k for k, v in theirs.items() if isinstance(v, torch.Tensor))
    for k, v in ours.items():
        assert _same(v, theirs[k]), k


def test_keys_and_skipping_non_tensors(saved, tmp_path):
    done = consolidate(saved / "torch", tmp_path / "w.lzy", keys="model.w*", non_tensors="skip")
    assert sorted(lt.load_file(tmp_path / "w.lzy")) == ["model.w0", "model.w1"]
    assert done.items == {} and done.skipped == {}
    done = consolidate(saved / "raw", tmp_path / "all.lzy", non_tensors="skip")
    assert set(done.skipped) == set(WORKER_ITEMS)
    assert ls.open(tmp_path / "all.lzy").metadata == {}
    with pytest.raises(ls.TensorNotFoundError):
        consolidate(saved / "raw", tmp_path / "none.lzy", keys="nothing.*")
    with pytest.raises(ls.InvalidInputError):
        consolidate(saved / "raw", tmp_path / "none.lzy", non_tensors="pickle")
    assert not (tmp_path / "none.lzy").exists()


def _grid_checkpoint(folder, fqn: str, full, bounds: list[list[int]], ranks: int = 3) -> None:
    """A lazystore DCP folder holding ``full`` cut at ``bounds`` (per axis) into
    a grid of chunks, spread over ``ranks`` rank files: layouts a 2-process
    run cannot make (chunks along several axes, uneven, many per file)."""
    import itertools
    import uuid

    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        MetadataIndex,
        TensorProperties,
        TensorStorageMetadata,
    )

    from lazystore.dcp import METADATA_FILE, LazyStorageInfo
    from lazystore.dcp import metadata as dcp_metadata

    save_id = uuid.uuid4().hex
    boxes = list(itertools.product(*[list(zip(b[:-1], b[1:])) for b in bounds]))
    writers = [ls.Writer(folder / rank_file(r)) for r in range(ranks)]
    chunks, storage = [], {}
    for i, box in enumerate(boxes):
        offsets, sizes = [a for a, _ in box], [b - a for a, b in box]
        index = MetadataIndex(fqn, offsets)
        key, w = dcp_metadata.item_key(index), writers[i % ranks]
        w.add(key, full[tuple(slice(a, b) for a, b in box)])
        chunks.append(ChunkStorageMetadata(torch.Size(offsets), torch.Size(sizes)))
        storage[index] = LazyStorageInfo(rank_file(i % ranks), key)
    for r, w in enumerate(writers):
        w.system_metadata[dcp_metadata.DCP_KEY] = {"save_id": save_id, "file": rank_file(r)}
        w.close()
    md = Metadata({fqn: TensorStorageMetadata(TensorProperties(dtype=torch.float32), torch.Size(full.shape), chunks)},
                  storage_data=storage)
    with ls.Writer(folder / METADATA_FILE) as w:
        w.system_metadata[dcp_metadata.DCP_KEY] = dcp_metadata.encode(md, save_id)


@pytest.mark.parametrize("shape,bounds", [
    ((10, 7), [[0, 3, 4, 10], [0, 5, 7]]),  # uneven rows and columns
    ((6, 5, 4), [[0, 6], [0, 2, 5], [0, 1, 4]]),  # cut along the inner axes only
    ((9,), [[0, 2, 3, 9]]),
])
def test_chunks_cut_along_any_axes_assemble_through_small_bands(tmp_path, monkeypatch, shape, bounds):
    import importlib

    import numpy as np

    consolidating = importlib.import_module("lazystore.dcp.consolidate")  # the module, not the function
    monkeypatch.setattr(consolidating, "BAND_BYTES", 2 * 4 * int(np.prod(shape[1:])))  # two rows a band
    full = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    (tmp_path / "ck").mkdir()
    _grid_checkpoint(tmp_path / "ck", "w", full, bounds)
    consolidate(tmp_path / "ck", tmp_path / "out.lzy")
    with ls.open(tmp_path / "out.lzy") as ck:
        assert ck["w"].tobytes() == full.tobytes() and ck["w"].shape == shape


# -- bad input: lazystore's errors naming the file, and nothing written --------------------


def _copy(saved, name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(saved / name, folder)
    return folder


def _refused(folder, tmp_path, error, *words):
    out = tmp_path / "out.lzy"
    out.write_bytes(b"the previous file")
    with pytest.raises(error) as exc_info:
        consolidate(folder, out)
    for w in words:
        assert str(w) in str(exc_info.value), exc_info.value
    assert out.read_bytes() == b"the previous file"  # untouched
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temporary file left beside it


def test_not_a_dcp_folder(tmp_path):
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", tmp_path, ls.FormatError, "not a DCP checkpoint", tmp_path / "empty")
    _refused(tmp_path / "nothing", tmp_path, ls.CheckpointNotFoundError, tmp_path / "nothing")
    _refused("memory://bucket/ckpt", tmp_path, ls.InvalidInputError, "local folder")


@pytest.mark.parametrize("name,file", [("torch", "__1_0.distcp"), ("zstd", rank_file(1))])
def test_missing_rank_file(saved, tmp_path, name, file):
    folder = _copy(saved, name, tmp_path)
    os.remove(folder / file)
    _refused(folder, tmp_path, ls.FormatError, folder / file, "missing")


def test_damaged_torch_chunk_fails_its_crc(saved, tmp_path):
    from lazystore.dcp import pickled_metadata

    folder = _copy(saved, "torch", tmp_path)
    md = pickled_metadata.read(folder / ".metadata")
    where = md.storage[("model.w1", (0, 45))]  # rank 1's columns of w1
    flip_byte(folder / where.file, where.offset + where.length // 2)  # inside the storage
    _refused(folder, tmp_path, ls.ChecksumError, folder / where.file, "model.w1")


def test_damaged_lazystore_chunk(saved, tmp_path):
    folder = _copy(saved, "raw", tmp_path)
    with ls.open(folder / rank_file(1)) as ck:
        info = ck.info("model.w0[34,0]")
    flip_byte(folder / rank_file(1), info.offset + 7)
    _refused(folder, tmp_path, ls.ChecksumError, folder / rank_file(1), "model.w0[34,0]")


def _rewrite_torch_metadata(folder, change) -> None:
    """Rewrite torch's .metadata the way a damaged (or hostile) checkpoint would have it."""
    path = folder / ".metadata"
    with open(path, "rb") as f:
        md = pickle.load(f)  # the test's own checkpoint, written by the worker
    change(md)
    with open(path, "wb") as f:
        pickle.dump(md, f)


def test_inconsistent_torch_metadata(saved, tmp_path):
    folder = _copy(saved, "torch", tmp_path)
    _rewrite_torch_metadata(folder, lambda md: md.state_dict_metadata["model.w1"].chunks.pop())
    _refused(folder, tmp_path, ls.FormatError, "model.w1", "missing part")

    def bf16(md):
        md.state_dict_metadata["model.w0"].properties.dtype = torch.bfloat16

    folder = _copy(saved, "torch", tmp_path / "x")
    _rewrite_torch_metadata(folder, bf16)
    _refused(folder, tmp_path / "x", ls.FormatError, "model.w0", "metadata says bfloat16")


def test_a_pickle_naming_other_globals_is_refused_without_running(saved, tmp_path):
    folder = _copy(saved, "torch", tmp_path)
    marker = tmp_path / "ran"
    _rewrite_torch_metadata(folder, lambda md: md.storage_meta.modules.append(_MakesFolder(marker)))
    _refused(folder, tmp_path, ls.FormatError, "posix.mkdir", "never runs code")
    assert not marker.exists()


def test_non_tensor_items_torch_refuses_are_skipped_and_never_run(tmp_path):
    marker = tmp_path / "ran"
    state = {"w": torch.arange(6.0).reshape(2, 3), "plain": {"a": [1, 2.5, "x", None]},
             "a_set": {1, 2}, "hostile": _MakesFolder(marker), "t": torch.tensor(3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(tmp_path / "ck"), no_dist=True)
    assert not marker.exists()
    done = consolidate(tmp_path / "ck", tmp_path / "out.lzy")
    assert not marker.exists()
    assert done.items == {"plain.a": [1, 2.5, "x", None]}
    assert set(done.skipped) == {"a_set", "hostile"}
    assert "not plain data" in done.skipped["a_set"] and "weights_only" in done.skipped["hostile"]
    got = lt.load_file(tmp_path / "out.lzy")
    assert torch.equal(got["w"], state["w"]) and torch.equal(got["t"], state["t"]) and got["t"].shape == ()


@pytest.mark.parametrize("kind,words", [("safetensors", "default (torch_save) format only"),
                                        ("zstd extension", "stream extensions")])
def test_formats_of_torchs_writer_lazystore_does_not_read(tmp_path, kind, words):
    from torch.distributed.checkpoint._extension import ZStandard
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    options = ({"serialization_format": SerializationFormat.SAFETENSORS} if kind == "safetensors"
               else {"_extensions": [ZStandard()]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(3, 4), "step": 1}, storage_writer=dcp.FileSystemWriter(tmp_path / "ck", **options),
                 no_dist=True)
    _refused(tmp_path / "ck", tmp_path, ls.FormatError, words, tmp_path / "ck")


# -- memory: bounded by the band and the writer's window, not by the model ------------------

_RSS_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch, lazystore.dcp
    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    before = status("VmRSS:")
    try:
        open("/proc/self/clear_refs", "w").write("5")  # VmHWM := VmRSS now
    except OSError:
        pass
    lazystore.dcp.consolidate(sys.argv[1], sys.argv[2])
    print(json.dumps({"before": before, "peak": status("VmHWM:")}))
""")


@pytest.mark.slow
def test_peak_memory_is_bounded_by_the_window_not_the_model(tmp_path):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux)")
    rows, cols = 4096, 4096  # 64 MiB per float32 tensor, 384 MiB in all
    g = torch.Generator().manual_seed(0)
    state = {f"layer{i}.weight": torch.randn(rows, cols, generator=g) for i in range(6)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=dcp.FileSystemWriter(tmp_path / "ck"), no_dist=True)
    model = sum(t.numel() * t.element_size() for t in state.values())
    del state
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(tmp_path / "ck"), str(tmp_path / "out.lzy")],
                          capture_output=True, text=True, env=env, timeout=300, check=True)
    rss = json.loads(proc.stdout)
    growth = rss["peak"] - rss["before"]
    # A 16 MiB band (and its read), the writer's 32 MiB window: ~100 MiB on the dev box,
    # the same for 256 MiB and 1 GiB models (docs/distributed.md); torch's dcp_to_torch_save
    # holds the whole model.
    assert growth < model / 3, f"peak grew by {growth >> 20} MiB consolidating {model >> 20} MiB"
    with ls.open(tmp_path / "out.lzy") as ck:
        assert len(ck) == 6 and ck.nbytes == model
