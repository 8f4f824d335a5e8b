"""torch's DCP ``.metadata`` read by lazystore's restricted unpickler
(lazystore/dcp/pickled_metadata.py): what a real one holds comes out as plain
values; a damaged one, cut short or with any byte changed, raises FormatError
and nothing else; a pickle naming anything but DCP's metadata classes is
refused before anything of it runs."""

import os
import pickle

import pytest

torch = pytest.importorskip("torch")

import lazystore as ls
from lazystore.dcp import pickled_metadata
from tests.dcp import dcp_worker as worker
from tests.dcp.test_storage import _MakesFolder  # unpickling it makes a folder: running code


def test_a_real_two_rank_metadata(saved):
    md = pickled_metadata.read(saved / "torch" / ".metadata")
    assert set(md.tensors) == set(worker.SHAPES)
    assert set(md.byte_items) == {"step", *(f"extra.{k}" for k in worker.EXTRA)}
    w1 = md.tensors["model.w1"]  # Shard(1) over 2 ranks
    assert w1.dtype == "float32" and w1.shape == (40, 90)
    assert sorted(zip(w1.chunks, w1.chunk_sizes)) == [((0, 0), (40, 45)), ((0, 45), (40, 45))]
    assert md.tensors["model.emb"].dtype == "bfloat16"
    files = {md.storage[("model.w1", offsets)].file for offsets in w1.chunks}
    assert files == {"__0_0.distcp", "__1_0.distcp"}


@pytest.mark.slow
def test_every_truncation_and_every_changed_byte_is_a_format_error(saved):
    data = (saved / "torch" / ".metadata").read_bytes()
    outcomes = set()
    cases = [data[:n] for n in range(len(data))]
    cases += [data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1:] for i in range(len(data))]
    for case in cases:
        try:
            pickled_metadata.parse(case, ".metadata")
            outcomes.add("read")  # a change the metadata survives (a character of a name, say)
        except ls.FormatError:
            outcomes.add("refused")
    assert "refused" in outcomes


def test_a_pickle_naming_another_global_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / ".metadata"
    for payload in (_MakesFolder(marker), {"x": _MakesFolder(marker)}, [os.system]):
        path.write_bytes(pickle.dumps(payload))
        with pytest.raises(ls.FormatError, match="never runs code"):
            pickled_metadata.read(path)
    assert not marker.exists()


def test_a_pickle_cannot_change_torchs_classes(saved, tmp_path):
    # BUILD on a global sets attributes on it: here on what "Metadata" resolves to,
    # which is a stand-in made for this one read, never torch's class.
    from torch.distributed.checkpoint.metadata import Metadata

    path = tmp_path / ".metadata"
    path.write_bytes(b"\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\n"
                     b"N}X\x04\x00\x00\x00evilK\x01s\x86b.")  # BUILD(Metadata, (None, {"evil": 1}))
    with pytest.raises(ls.FormatError):
        pickled_metadata.read(path)
    assert not hasattr(Metadata, "evil")
    assert pickled_metadata.read(saved / "torch" / ".metadata").tensors  # the next read is unaffected


def test_an_ordered_dict_in_the_metadata_reads_as_a_dict(saved, tmp_path):
    from collections import OrderedDict

    with open(saved / "torch" / ".metadata", "rb") as f:
        md = pickle.load(f)  # the test's own checkpoint, written by the worker
    md.planner_data = OrderedDict(md.planner_data)
    md.state_dict_metadata = OrderedDict(md.state_dict_metadata)
    again = pickled_metadata.parse(pickle.dumps(md), ".metadata")
    assert again == pickled_metadata.read(saved / "torch" / ".metadata")
