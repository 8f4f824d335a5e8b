"""Every public entry point refuses a bad argument with InvalidInputError
(a ValueError), before anything is written: never a bare ValueError or
TypeError from deep inside (zstandard, dict(), a comparison with a str)."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
import lazystore.numpy as ls_numpy
from lazystore.interop import SafetensorsWriter, ShardedWriter

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


@pytest.mark.parametrize("save", [ls.save, ls.save_async], ids=["blocking", "background"])
@pytest.mark.parametrize("options", BAD_SAVE_OPTIONS.values(), ids=BAD_SAVE_OPTIONS)
def test_save_refuses_bad_options(tmp_path, options, save):
    _raises_and_writes_nothing(tmp_path, lambda: save(ARRAYS, tmp_path / "a.lzy", **options))


@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_writer_refuses_bad_options(tmp_path, options):
    _raises_and_writes_nothing(tmp_path, lambda: ls.Writer(tmp_path / "a.lzy", **options))


@pytest.mark.parametrize("name", ["a.lzy", "a.safetensors"])
@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_torch_save_file_refuses_bad_options(tmp_path, options, name):
    torch_files = pytest.importorskip("lazystore.torch")
    torch = pytest.importorskip("torch")
    metadata = options.get("metadata")
    rest = {k: v for k, v in options.items() if k != "metadata"}
    _raises_and_writes_nothing(
        tmp_path, lambda: torch_files.save_file({"w": torch.ones(8)}, tmp_path / name, metadata, **rest))


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


# -- every writer checks its options when it is built, not at the first encode -------------

# What a safetensors file can be asked for: no layout, no compression, but a
# compression_level is checked as a Writer checks it.
BAD_SAFETENSORS_WRITER_OPTIONS = {k: v for k, v in BAD_WRITER_OPTIONS.items()
                                  if k.startswith(("level", "metadata", "compression"))}


@pytest.mark.parametrize("save", [ls.save, ls.save_async], ids=["blocking", "background"])
@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_save_as_safetensors_refuses_bad_options(tmp_path, options, save):
    _raises_and_writes_nothing(tmp_path, lambda: save(ARRAYS, tmp_path / "a.safetensors", **options))


@pytest.mark.parametrize("options", BAD_SAFETENSORS_WRITER_OPTIONS.values(), ids=BAD_SAFETENSORS_WRITER_OPTIONS)
def test_safetensors_writer_refuses_bad_options(tmp_path, options):
    _raises_and_writes_nothing(tmp_path, lambda: SafetensorsWriter(tmp_path / "a.safetensors", **options))


@pytest.mark.parametrize("options", BAD_WRITER_OPTIONS.values(), ids=BAD_WRITER_OPTIONS)
def test_sharded_writer_refuses_bad_options(tmp_path, options):
    _raises_and_writes_nothing(tmp_path, lambda: ShardedWriter(tmp_path / "s", max_shard_size=100, **options))


@pytest.mark.parametrize("compression", ["lz4", "zstd ", 3])
def test_checkpoint_manager_refuses_a_bad_compression_when_built(tmp_path, compression):
    _raises_and_writes_nothing(tmp_path, lambda: ls.CheckpointManager(tmp_path / "run", compression=compression))


def test_valid_safetensors_and_sharded_options_still_pass(tmp_path):
    ls.save(ARRAYS, tmp_path / "a.safetensors", compression="none", compression_level=3)
    with SafetensorsWriter(tmp_path / "b.safetensors", compression=None, compression_level=-5) as w:
        w.add("w", ARRAYS["w"], compression="zstd")  # per tensor, accepted and ignored as before
    with ShardedWriter(tmp_path / "s", max_shard_size=1 << 20, compression="zstd", compression_level=3,
                       chunk_bytes=1024, alignment=64) as w:
        w.add("w", ARRAYS["w"])
    for path in ("a.safetensors", "b.safetensors", "s"):
        assert np.array_equal(ls.load(tmp_path / path)["w"], ARRAYS["w"])
    with ls.open(tmp_path / "s") as ck:
        assert ck.info("w").compression == "zstd" and ck.info("w").chunk_count == 16


# -- a misspelt keyword is named, with the one meant ------------------------------------

TYPOS = {"compresion": "compression", "compression_levl": "compression_level", "chunk_byte": "chunk_bytes",
         "alignement": "alignment", "metdata": "metadata", "max_shard_sise": "max_shard_size"}


def _savers():
    yield "ls.save", lambda p, **kw: ls.save(ARRAYS, p / "a.lzy", **kw)
    yield "ls.save safetensors", lambda p, **kw: ls.save(ARRAYS, p / "a.safetensors", **kw)
    yield "ls.save_async", lambda p, **kw: ls.save_async(ARRAYS, p / "a.lzy", **kw)
    yield "numpy.save_file", lambda p, **kw: ls_numpy.save_file(ARRAYS, p / "a.lzy", **kw)
    yield "numpy.save", lambda p, **kw: ls_numpy.save(ARRAYS, **kw)
    try:
        import torch

        import lazystore.torch as lt
    except ImportError:
        return
    yield "torch.save_file", lambda p, **kw: lt.save_file({"w": torch.ones(8)}, p / "a.lzy", **kw)
    yield "torch.save", lambda p, **kw: lt.save({"w": torch.ones(8)}, **kw)


SAVERS = dict(_savers())


@pytest.mark.parametrize("typo", TYPOS)
@pytest.mark.parametrize("saver", SAVERS)
def test_a_misspelt_keyword_is_named_with_the_one_meant(tmp_path, saver, typo):
    if saver.startswith("torch") and typo == "max_shard_sise":
        pytest.skip("lazystore.torch writes one file: max_shard_size is no keyword of its either")
    err = _raises_and_writes_nothing(tmp_path, lambda: SAVERS[saver](tmp_path, **{typo: 1}))
    assert repr(typo) in str(err) and f"did you mean {TYPOS[typo]!r}?" in str(err)


def test_an_unknown_keyword_like_nothing_lists_the_accepted_ones(tmp_path):
    err = _raises_and_writes_nothing(tmp_path, lambda: ls.save(ARRAYS, tmp_path / "a.lzy", workers=2))
    assert "'workers'" in str(err) and "did you mean" not in str(err) and "chunk_bytes" in str(err)


@pytest.mark.parametrize("build", [
    lambda p, **kw: ls.Writer(p / "a.lzy", **kw),
    lambda p, **kw: SafetensorsWriter(p / "a.safetensors", **kw),
    lambda p, **kw: ShardedWriter(p / "s", max_shard_size=100, **kw),
    lambda p, **kw: ls.CheckpointManager(p / "run", **kw),
], ids=["Writer", "SafetensorsWriter", "ShardedWriter", "CheckpointManager"])
def test_explicit_keyword_surfaces_refuse_a_typo(tmp_path, build):
    # Their keywords are spelt out in their signatures: Python refuses the
    # typo, naming it, before anything is made.
    before = set(tmp_path.iterdir())
    with pytest.raises(TypeError, match="compresion"):
        build(tmp_path, compresion="zstd")
    assert set(tmp_path.iterdir()) == before
