"""``lazystore convert DCP_FOLDER out.lzy``: a distributed checkpoint folder,
lazystore's or torch's, consolidated into one file (lazystore.dcp.consolidate;
its multi-rank tests are in tests/dcp/test_consolidate.py)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

import lazystore as ls
import lazystore.torch as lt
from lazystore.dcp import LazyStoreWriter, rank_file
from tests.cli.helpers import assert_one_error_line, flip_byte, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

STATE = {"w": torch.arange(24, dtype=torch.float32).reshape(4, 6), "b": torch.ones(3, dtype=torch.bfloat16),
         "step": 7}


@pytest.fixture(params=["lazystore", "torch"])
def folder(request, tmp_path):
    path = tmp_path / "ckpt"
    writer = LazyStoreWriter(path) if request.param == "lazystore" else dcp.FileSystemWriter(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(dict(STATE), storage_writer=writer, no_dist=True)
    return path


def test_convert_consolidates_a_dcp_folder(folder, tmp_path, capsys):
    code, out, err = run(capsys, "convert", folder, tmp_path / "m.lzy", "--compression", "zstd", "--level", "3")
    assert code == 0, err
    assert out.startswith(f"{tmp_path / 'm.lzy'}: 2 tensors, 1 non-tensor item in its metadata, 102 B -> ")
    assert out.endswith(" on disk\n")
    got = lt.load_file(tmp_path / "m.lzy")
    assert torch.equal(got["w"], STATE["w"]) and torch.equal(got["b"], STATE["b"])
    assert ls.open(tmp_path / "m.lzy").metadata == {"dcp_items": {"step": 7}}


def test_convert_refuses_other_outputs_for_dcp_input(folder, tmp_path, capsys):
    for extra in (["--max-shard-size", "1MB"], []):
        dst = tmp_path / ("m.lzy" if extra else "m.safetensors")
        code, out, err = run(capsys, "convert", folder, dst, *extra)
        assert code == 2 and "one lazystore file" in err and not dst.exists()
        assert_one_error_line(err)


def test_convert_names_the_damaged_file(folder, tmp_path, capsys):
    damaged = folder / (rank_file(0) if (folder / rank_file(0)).exists() else "__0_0.distcp")
    size = damaged.stat().st_size
    for offset in range(size // 4, size, size // 8):
        flip_byte(damaged, offset)
    code, out, err = run(capsys, "convert", folder, tmp_path / "m.lzy")
    assert code == 2 and str(damaged) in err and not (tmp_path / "m.lzy").exists()
    assert_one_error_line(err)
