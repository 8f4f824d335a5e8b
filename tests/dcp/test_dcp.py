"""lazystore as a torch.distributed.checkpoint storage backend (lazystore.dcp).

The 2-rank run (tests/dcp/dcp_worker.py: gloo on 127.0.0.1, two processes started
by tests/dcp/conftest.py) saves DTensors -- Shard(0), Shard(1), Replicate(), a bf16 tensor -- and
non-tensor items raw, with zstd and with dcp.async_save, and loads them back on
the same 2 ranks, also resharded. The tests below then load those checkpoints
in this single process (no_dist=True) into full tensors, bit-exactly.
"""

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from torch.distributed.checkpoint.api import CheckpointException

import lazystore as ls
from lazystore._core.distribution import DISTRIBUTION
from lazystore.dcp import METADATA_FILE, LazyStoreReader, LazyStoreWriter, rank_file
from lazystore.dcp import metadata as dcp_metadata
from tests.dcp import dcp_worker as worker

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def _bits(t):
    return worker.bits(t)


def _empty_state():
    full = worker.full_tensors()
    sd = {k: torch.zeros_like(v) for k, v in full.items()}
    sd["step"] = 0
    sd["extra"] = {"lr": 0.0, "betas": [0.0, 0.0], "name": ""}
    return sd


def _load_no_dist(path, **reader_options):
    sd = _empty_state()  # step and extra: non-tensor items, unpickled by DCP (tests/dcp/test_storage.py)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(sd, storage_reader=LazyStoreReader(path, allow_pickle=True, **reader_options), no_dist=True)
    return sd


def test_two_ranks_save_and_load_on_the_same_two_ranks(saved):
    # The worker asserted every value (and the resharded loads) on both ranks.
    assert (saved / "ok-0").exists() and (saved / "ok-1").exists()


@pytest.mark.parametrize("name", ["raw", "zstd", "async"])
def test_single_process_loads_full_tensors_bit_exactly(saved, name):
    sd = _load_no_dist(saved / name)
    full = worker.full_tensors()
    for k, want in full.items():
        assert sd[k].dtype == want.dtype and sd[k].shape == want.shape
        assert torch.equal(_bits(sd[k]), _bits(want)), k
    assert sd["step"] == worker.STEP
    assert sd["extra"] == worker.EXTRA


@pytest.mark.parametrize("name", ["raw", "zstd", "async"])
def test_folder_holds_only_lazystore_files_that_verify(saved, name):
    files = sorted(os.listdir(saved / name))
    assert files == [METADATA_FILE, rank_file(0), rank_file(1)]
    for f in files:
        with ls.open(saved / name / f) as ck:
            assert ck.verify() == []
    with ls.open(saved / name / rank_file(0)) as ck:
        assert "model.w0[0,0]" in ck and ck["model.w0[0,0]"].shape == (34, 48)
        compressed = {ck.info(n).compression for n in ck}
        assert compressed == ({None} if name == "raw" else {"zstd"})
    with ls.open(saved / name / METADATA_FILE) as ck:
        assert len(ck) == 0
        doc = ck.system_metadata[dcp_metadata.DCP_KEY]
    assert doc["format"] == "lazystore-dcp"
    assert doc["state_dict"]["model.emb"]["dtype"] == "bfloat16"
    assert doc["state_dict"]["step"] == {"type": "bytes"}
    json.dumps(doc)  # plain JSON: nothing pickled


def test_metadata_round_trips_through_json(saved):
    reader = LazyStoreReader(saved / "zstd")
    md = reader.read_metadata()
    doc = dcp_metadata.encode(md, reader.save_id)
    again, save_id = dcp_metadata.decode(json.loads(json.dumps(doc)))
    assert save_id == reader.save_id
    assert again.state_dict_metadata == md.state_dict_metadata
    assert again.storage_data == md.storage_data
    assert again.planner_data == md.planner_data and isinstance(again.planner_data["extra.betas"], tuple)
    chunks = md.state_dict_metadata["model.w1"].chunks
    assert sorted(tuple(c.offsets) for c in chunks) == [(0, 0), (0, 45)]


@pytest.mark.parametrize("tamper", [
    lambda d: d.update(format="pickle"),
    lambda d: d.update(version=True),
    lambda d: d["state_dict"]["model.w0"].update(dtype="object"),
    lambda d: d["state_dict"]["model.w0"].update(size=[1, -3]),
    lambda d: d["state_dict"]["model.w0"].update(size=[2**61, 48]),  # float32: rule E8's bound
    lambda d: d["state_dict"]["model.w0"].update(size=[0, 2**61], chunks=[]),  # no elements, still too big
    lambda d: d["state_dict"]["model.w0"]["chunks"][0].update(sizes=[999, 48]),
    lambda d: d["state_dict"]["model.w0"].update(evil=1),
    lambda d: d["storage"][0].update(file="../../etc/passwd"),
    lambda d: d["storage"][0].update(fqn="nope"),
    lambda d: d["storage"].append(dict(d["storage"][0])),
    lambda d: d.update(planner_data={"kind": "paths", "value": {"a": [1.5]}}),
    lambda d: d.update(planner_data={"kind": "pickle", "value": "gASV"}),
    lambda d: d.update(storage_meta={"checkpoint_id": 3, "save_id": None, "modules": []}),
])
def test_decoder_is_strict(saved, tamper):
    with ls.open(saved / "raw" / METADATA_FILE) as ck:
        doc = json.loads(json.dumps(ck.system_metadata[dcp_metadata.DCP_KEY]))
    tamper(doc)
    with pytest.raises(ls.FormatError):
        dcp_metadata.decode(doc)


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def _failure(exc_info):
    (error, _trace), = exc_info.value.failures.values()
    return error


def test_corrupt_compressed_rank_file_fails_the_load(saved, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(saved / "zstd", ckpt)
    with ls.open(ckpt / rank_file(1)) as ck:
        info = ck.info("model.w0[34,0]")
    _flip(ckpt / rank_file(1), info.offset + info.stored_nbytes // 2)
    with ls.open(ckpt / rank_file(1)) as ck:
        assert ck.verify() == ["model.w0[34,0]"]
    with pytest.raises(CheckpointException) as exc_info:
        _load_no_dist(ckpt)
    assert isinstance(_failure(exc_info), ls.ChecksumError)


def test_corrupt_raw_rank_file_is_caught_by_default(saved, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(saved / "raw", ckpt)
    with ls.open(ckpt / rank_file(0)) as ck:
        info = ck.info("model.emb[0,0]")
    _flip(ckpt / rank_file(0), info.offset + 5)
    with ls.open(ckpt / rank_file(0)) as ck:
        assert ck.verify() == ["model.emb[0,0]"]
    with pytest.raises(CheckpointException) as exc_info:
        _load_no_dist(ckpt)  # checked by default, as ls.load is
    assert isinstance(_failure(exc_info), ls.ChecksumError)
    _load_no_dist(ckpt, verify=False)  # the opt-out reads the raw bytes unchecked


def test_rank_file_from_another_save_is_refused(saved, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(saved / "zstd", ckpt)
    shutil.copy(saved / "async" / rank_file(1), ckpt / rank_file(1))  # same items, other save
    with pytest.raises(CheckpointException) as exc_info:
        _load_no_dist(ckpt)
    assert isinstance(_failure(exc_info), ls.FormatError)
    assert "another save" in str(_failure(exc_info))


def test_missing_checkpoint(tmp_path):
    with pytest.raises(ls.CheckpointNotFoundError):
        LazyStoreReader(tmp_path / "nothing").read_metadata()


def test_a_torch_folder_given_to_lazystores_reader_says_what_to_do(saved):
    with pytest.raises(ls.CheckpointNotFoundError) as exc_info:
        LazyStoreReader(saved / "torch").read_metadata()
    assert "torch's FileSystemWriter" in str(exc_info.value)
    assert "lazystore.dcp.consolidate" in str(exc_info.value)


def test_dcp_load_without_a_reader_only_knows_torchs_readers(tmp_path):
    # torch 2.13's _storage_setup tries FileSystemReader then FsspecReader, hard-coded:
    # there is no registry a third-party reader could join, so a lazystore folder needs
    # storage_reader= (docs/distributed.md). If torch grows one, this test says so.
    sd = _small_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, storage_writer=LazyStoreWriter(tmp_path), no_dist=True)
        out = {"w": torch.zeros(4, 6)}
        with pytest.raises(CheckpointException, match=r"\.metadata"):
            dcp.load(out, checkpoint_id=tmp_path, no_dist=True)
        dcp.load(out, storage_reader=LazyStoreReader(tmp_path), no_dist=True)  # the one-liner
    assert torch.equal(out["w"], sd["w"])


class _Planner:
    """The two calls read_data makes for a tensor item, recording what it got."""

    def __init__(self, shape):
        self.target = torch.zeros(shape)

    def resolve_tensor(self, req):
        return self.target

    def commit_tensor(self, req, tensor):
        self.committed = tensor


def test_reads_only_the_chunks_a_shard_needs(saved, tmp_path):
    from torch.distributed.checkpoint.metadata import MetadataIndex
    from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem

    ckpt = tmp_path / "ck"
    shutil.copytree(saved / "zstd", ckpt)
    reader = LazyStoreReader(ckpt)
    md = reader.read_metadata()
    reader.set_up_storage_reader(md, True)
    key = "model.w0[0,0]"  # rows 0-33 of w0, zstd in 7 chunks of ~5 rows
    with ls.open(ckpt / rank_file(0)) as ck:
        info = ck.info(key)
    _flip(ckpt / rank_file(0), info.offset + info.stored_nbytes - 3)  # damage the last chunk only
    index = MetadataIndex("model.w0", [0, 0])
    req = ReadItem(type=LoadItemType.TENSOR, dest_index=index, dest_offsets=torch.Size([0, 0]),
                   storage_index=index, storage_offsets=torch.Size([2, 0]), lengths=torch.Size([3, 48]))
    planner = _Planner((3, 48))
    reader.read_data(LoadPlan([req]), planner).wait()  # never touches the damaged chunk
    assert torch.equal(planner.committed, worker.full_tensors()["model.w0"][2:5])
    tail = ReadItem(type=LoadItemType.TENSOR, dest_index=index, dest_offsets=torch.Size([0, 0]),
                    storage_index=index, storage_offsets=torch.Size([31, 0]), lengths=torch.Size([3, 48]))
    with pytest.raises(ls.ChecksumError):
        reader.read_data(LoadPlan([tail]), _Planner((3, 48)))


def _small_state():
    return {"w": torch.arange(24, dtype=torch.float32).reshape(4, 6), "b": torch.ones(3, dtype=torch.bfloat16),
            "epoch": 3}


def test_single_process_save_overwrite_and_url(tmp_path):
    sd = _small_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in (tmp_path / "local", "memory://lazystore-dcp-test/ck"):
            dcp.save(sd, storage_writer=LazyStoreWriter(path, compression="zstd"), no_dist=True)
            dcp.save(sd, storage_writer=LazyStoreWriter(path), no_dist=True)  # overwrites
            out = {"w": torch.zeros(4, 6), "b": torch.zeros(3, dtype=torch.bfloat16), "epoch": 0}
            dcp.load(out, storage_reader=LazyStoreReader(path, allow_pickle=True), no_dist=True)
            assert torch.equal(out["w"], sd["w"]) and torch.equal(out["b"], sd["b"]) and out["epoch"] == 3
        with pytest.raises(CheckpointException) as exc_info:
            dcp.save(sd, storage_writer=LazyStoreWriter(tmp_path / "local", overwrite=False), no_dist=True)
    assert isinstance(_failure(exc_info), ls.InvalidInputError)


def test_protocol_surface():
    from torch.distributed.checkpoint import StorageReader, StorageWriter

    assert issubclass(LazyStoreWriter, StorageWriter) and issubclass(LazyStoreReader, StorageReader)
    assert LazyStoreWriter.validate_checkpoint_id("ckpt") and LazyStoreReader.validate_checkpoint_id(Path("c"))
    assert not LazyStoreReader.validate_checkpoint_id(3)
    w = LazyStoreWriter("a")
    w.reset("b")
    assert w.storage_meta().checkpoint_id == "b"
    with pytest.raises(ls.LazyStoreError):
        LazyStoreWriter("a", compression="lzma")


@pytest.mark.slow
def test_import_lazystore_does_not_import_torch():
    code = "import sys, lazystore; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_save_without_collectives_writes_rank_metadata(tmp_path):
    sd = _small_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, storage_writer=LazyStoreWriter(tmp_path), no_dist=True, use_collectives=False)
        assert sorted(os.listdir(tmp_path)) == ["metadata-rank-00000.lzy", rank_file(0)]
        out = {"w": torch.zeros(4, 6), "b": torch.zeros(3, dtype=torch.bfloat16), "epoch": 0}
        dcp.load(out, storage_reader=LazyStoreReader(tmp_path, allow_pickle=True), no_dist=True)
    assert torch.equal(out["w"], sd["w"]) and out["epoch"] == 3


@pytest.mark.slow
def test_a_save_with_fewer_ranks_removes_the_older_saves_rank_files(saved, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(saved / "raw", folder)
    assert rank_file(1) in os.listdir(folder)
    sd = _small_state()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, storage_writer=LazyStoreWriter(folder), no_dist=True)  # one rank now
        out = {"w": torch.zeros(4, 6), "b": torch.zeros(3, dtype=torch.bfloat16), "epoch": 0}
        dcp.load(out, storage_reader=LazyStoreReader(folder, allow_pickle=True), no_dist=True)
    assert torch.equal(out["w"], sd["w"]) and out["epoch"] == 3
    assert sorted(os.listdir(folder)) == [METADATA_FILE, rank_file(0)]


@pytest.mark.slow
def test_a_url_checkpoint_without_fsspec_names_the_extra(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['fsspec'] = None  # as if the remote extra were not installed\n"
        "import lazystore as ls\n"
        "from lazystore.dcp import LazyStoreWriter\n"
        "w = LazyStoreWriter('s3://bucket/ck')\n"
        "try:\n"
        "    w._check_existing('metadata.lzy')\n"
        "except ls.MissingDependencyError as exc:\n"
        f"    assert \"'{DISTRIBUTION}[remote]'\" in str(exc), exc\n"
        "    print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stderr[-2000:]
