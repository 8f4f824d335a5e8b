"""Every public entry point refuses a bad argument with InvalidInputError
(a ValueError), before anything is written: never a bare ValueError or
TypeError from deep inside (zstandard, dict(), a comparison with a str)."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore.interop import SafetensorsWriter

ARRAYS = {"w": np.random.default_rng(0).standard_normal(4096).astype(np.float32)}

# Writer options and what is wrong with them. Each is a caller's mistake.
BAD_WRITER_OPTIONS = {
    "level 40": {"compression": "zstd", "compression_level": 40},
    "level 40 without compression": {"compression_level": 40},  # a per-tensor zstd would use it later
    "level below zstd's": {"compression": "zstd", "compression_level": -(1 << 17) - 1},
    "level str": {"compression": "zstd", "compression_level": "3"},
    "level float": {"compression": "zstd", "compression_level": 3.5},
    "level bool": {"compression": "zstd", "compression_level": True},
    "level huge": {"compression": "zstd", "compression_level": 10**30},
    "metadata str": {"metadata": "oops"},
    "metadata list of pairs": {"metadata": [("a", "b")]},
    "metadata int": {"metadata": 3},
    "metadata int key": {"metadata": {1: "a"}},
    "metadata NaN": {"metadata": {"a": float("nan")}},
    "chunk_bytes str": {"chunk_bytes": "1MB"},
    "chunk_bytes float": {"chunk_bytes": 65536.0},
    "chunk_bytes 0": {"chunk_bytes": 0},
    "alignment str": {"alignment": "64"},
    "alignment 3": {"alignment": 3},
    "compression unknown": {"compression": "lz4"},
}
BAD_SAVE_OPTIONS = {
    **BAD_WRITER_OPTIONS,
    "max_shard_size str": {"max_shard_size": "1GB"},
    "max_shard_size 0": {"max_shard_size": 0},
    "max_shard_size float": {"max_shard_size": 1e9},
    "unknown option": {"workers": 2},
}


def _raises_and_writes_nothing(tmp_path, call):
    before = set(tmp_path.iterdir())
    with pytest.raises(ls.InvalidInputError) as info:
        call()
    assert isinstance(info.value, ValueError)  # old `except ValueError` clauses still catch it
    assert set(tmp_path.iterdir()) == before  # refused before a file (or folder) appeared
    return info.value


@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "background"])
@pytest.mark.parametrize("options", BAD_SAVE_OPTIONS.values(), ids=BAD_SAVE_OPTIONS)
def test_save_refuses_bad_options(tmp_path, options, blocking):
    _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, tmp_path / "a.lzy", blocking=blocking, **options))


@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_writer_refuses_bad_options(tmp_path, options):
    _raises_and_writes_nothing(tmp_path, lambda: ls.Writer(tmp_path / "a.lzy", **options))


@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_torch_save_file_refuses_bad_options(tmp_path, options):
    torch_files = pytest.importorskip("lazystore.torch")
    torch = pytest.importorskip("torch")
    metadata = options.get("metadata")
    rest = {k: v for k, v in options.items() if k != "metadata"}
    _raises_and_writes_nothing(
        tmp_path, lambda: torch_files.save_file({"w": torch.ones(8)}, tmp_path / "a.lzy", metadata, **rest))


def test_the_message_names_the_argument(tmp_path):
    err = _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, tmp_path / "a.lzy", compression="zstd",
                                                                 compression_level=40))
    assert "compression_level" in str(err) and "22" in str(err)
    err = _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, tmp_path / "a.lzy", metadata="oops"))
    assert "metadata must be a dict" in str(err)


@pytest.mark.parametrize("metadata", ["oops", [("a", "b")]], ids=["str", "pairs"])
def test_other_writers_refuse_metadata_that_is_not_a_mapping(tmp_path, metadata):
    _raises_and_writes_nothing(tmp_path, lambda: SafetensorsWriter(tmp_path / "a.safetensors", metadata=metadata))
    _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, tmp_path / "s", max_shard_size=100,
                                                         metadata=metadata))


def _readers():
    yield "ls.open", lambda p: ls.open(p)
    yield "ls.load", lambda p: ls.load(p)
    try:
        import lazystore.torch as lt
    except ImportError:
        return
    yield "load_file", lambda p: lt.load_file(p)
    yield "safe_open", lambda p: lt.safe_open(p, framework="pt")
    yield "save_file", lambda p: lt.save_file({}, p)


READERS = dict(_readers())


@pytest.mark.parametrize("path", [None, 3, 2.5, ["a.lzy"]], ids=repr)
@pytest.mark.parametrize("entry", READERS)
def test_a_path_that_is_not_a_path(tmp_path, entry, path):
    err = _raises_and_writes_nothing(tmp_path, lambda: READERS[entry](path))
    assert "expected a path" in str(err)


@pytest.mark.parametrize("path", [None, 3])
def test_save_to_a_path_that_is_not_a_path(tmp_path, path):
    _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, path))
    _raises_and_writes_nothing(tmp_path, lambda: ls.Writer(path))


@pytest.mark.slow
def test_good_levels_still_pass(tmp_path):
    for level in (1, 22, 0, -5, np.int64(3)):  # zstd's levels, its fast ones, a numpy int
        ls.save(ARRAYS, tmp_path / "a.lzy", compression="zstd", compression_level=level)
        assert np.array_equal(ls.load(tmp_path / "a.lzy")["w"], ARRAYS["w"])
