"""Writer: atomic replacement, cleanup on failure, closing, bounded memory."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import lazystore as ls
from tests.paths import REPO


def same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def folder_entries(folder: Path) -> list[str]:
    """Every entry of a folder, hidden ones included."""
    return sorted(os.listdir(folder))


@pytest.fixture
def old_file(tmp_path):
    """An existing checkpoint at the target path, and its exact bytes."""
    path = tmp_path / "model.lzy"
    ls.save({"old": np.arange(100, dtype=np.int32)}, path, metadata={"v": "old"})
    return path, path.read_bytes()


def assert_old_file_intact(path: Path, old_bytes: bytes) -> None:
    assert folder_entries(path.parent) == [path.name]  # no temp files left over
    assert path.read_bytes() == old_bytes
    with ls.open(path) as ck:
        assert list(ck) == ["old"] and ck.metadata == {"v": "old"}
        assert ck.verify() == []


# ---------------------------------------------------------------------------
# atomicity and cleanup
# ---------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_exception_in_with_block_leaves_no_file(tmp_path):
    path = tmp_path / "model.lzy"
    with pytest.raises(Boom):
        with ls.Writer(path) as w:
            w.add("a", np.zeros((100, 100)))
            # While writing, only a hidden temporary exists, not the target.
            assert not path.exists()
            entries = folder_entries(tmp_path)
            assert len(entries) == 1 and entries[0].startswith(".") and entries[0].endswith(".partial")
            raise Boom
    assert folder_entries(tmp_path) == []


def test_exception_in_with_block_keeps_existing_file(old_file):
    path, old_bytes = old_file
    with pytest.raises(Boom):
        with ls.Writer(path, compression="zstd") as w:
            w.add("new", np.ones((256, 256), dtype=np.float32))
            w.add("new2", np.zeros(10))
            assert path.read_bytes() == old_bytes  # nothing visible before close
            raise Boom
    assert_old_file_intact(path, old_bytes)


def test_keyboard_interrupt_in_with_block_keeps_existing_file(old_file):
    path, old_bytes = old_file
    with pytest.raises(KeyboardInterrupt):
        with ls.Writer(path) as w:
            w.add("new", np.ones(1000))
            raise KeyboardInterrupt
    assert_old_file_intact(path, old_bytes)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_save_failing_midway_keeps_existing_file(old_file, compression):
    path, old_bytes = old_file
    tensors = {
        "a": np.zeros((64, 64), dtype=np.float32),
        "b": np.arange(1000),
        "c": np.array(["not", "storable"]),  # unsupported dtype, third
        "d": np.ones(5),
    }
    with pytest.raises(ls.UnsupportedDtypeError):
        ls.save(tensors, path, compression=compression)
    assert_old_file_intact(path, old_bytes)


@pytest.mark.parametrize(
    "bad",
    [{1.5: np.zeros(2)}, {"a\0b": np.zeros(2)}, {"x": object()}],
    ids=["non_str_key", "nul_key", "object"],
)
def test_save_failing_on_bad_input_keeps_existing_file(old_file, bad):
    path, old_bytes = old_file
    tensors = {"first": np.zeros(1000), "second": np.ones(10), **bad}
    with pytest.raises(ls.InvalidInputError):
        ls.save(tensors, path)
    assert_old_file_intact(path, old_bytes)


def test_save_failing_on_unencodable_key_keeps_existing_file(old_file):
    path, old_bytes = old_file
    with pytest.raises(ls.InvalidInputError):
        ls.save({"first": np.zeros(1000), "bad\udcff": np.ones(3)}, path)
    assert_old_file_intact(path, old_bytes)


def test_successful_save_replaces_file_atomically(old_file):
    path, old_bytes = old_file
    with ls.open(path) as before:
        ls.save({"new": np.full(7, 2.5)}, path)
        # A reader of the old file still sees the old file, whole.
        assert same_bits(before["old"], np.arange(100, dtype=np.int32))
        assert list(before) == ["old"]
    assert folder_entries(path.parent) == [path.name]
    with ls.open(path) as ck:
        assert list(ck) == ["new"]
        assert same_bits(ck["new"], np.full(7, 2.5))
        assert ck.metadata == {}


def test_abort(old_file):
    path, old_bytes = old_file
    w = ls.Writer(path)
    w.add("new", np.zeros(1000))
    w.abort()
    assert_old_file_intact(path, old_bytes)
    with pytest.raises(ls.ClosedError):
        w.add("more", np.zeros(1))
    w.abort()  # idempotent
    w.close()  # after abort, close does not resurrect anything
    assert_old_file_intact(path, old_bytes)


def test_abort_inside_with_block(tmp_path):
    path = tmp_path / "model.lzy"
    with ls.Writer(path) as w:
        w.add("a", np.zeros(10))
        w.abort()
    assert folder_entries(tmp_path) == []


def test_add_after_close_raises_closed_error(tmp_path):
    path = tmp_path / "model.lzy"
    w = ls.Writer(path)
    w.add("a", np.arange(3))
    w.close()
    with pytest.raises(ls.ClosedError):
        w.add("b", np.arange(3))
    w.close()  # closing twice is fine
    with ls.open(path) as ck:
        assert list(ck) == ["a"]

    with ls.Writer(tmp_path / "other.lzy") as w2:
        w2.add("x", np.zeros(1))
    with pytest.raises(ls.ClosedError):
        w2.add("y", np.zeros(1))
    assert issubclass(ls.ClosedError, ls.LazyStoreError)


@pytest.mark.slow
def test_dropped_writer_leaves_no_temp_file(tmp_path):
    w = ls.Writer(tmp_path / "model.lzy")
    w.add("a", np.zeros(1000))
    assert len(folder_entries(tmp_path)) == 1
    del w
    gc.collect()
    assert folder_entries(tmp_path) == []


def test_empty_writer_makes_an_empty_checkpoint(tmp_path):
    path = tmp_path / "model.lzy"
    with ls.Writer(path, metadata={"k": [1, 2]}):
        pass
    with ls.open(path) as ck:
        assert len(ck) == 0 and ck.metadata == {"k": [1, 2]}
    assert folder_entries(tmp_path) == ["model.lzy"]


def test_writer_does_not_create_target_until_close(tmp_path):
    path = tmp_path / "model.lzy"
    w = ls.Writer(path)
    w.add("a", np.zeros(10))
    assert not path.exists()
    w.close()
    assert path.exists()
    assert folder_entries(tmp_path) == ["model.lzy"]


@pytest.mark.parametrize(
    "kwargs",
    [dict(alignment=3), dict(alignment=4), dict(alignment=100), dict(chunk_bytes=8), dict(chunk_bytes=0)],
    ids=repr,
)
def test_bad_writer_options(tmp_path, kwargs):
    with pytest.raises(ls.InvalidInputError):
        ls.Writer(tmp_path / "model.lzy", **kwargs)
    assert folder_entries(tmp_path) == []


@pytest.mark.parametrize("shape", [(0, 2**61), (2**59, 0, 2**3), (2**62,)], ids=repr)
def test_writer_refuses_a_shape_no_reader_can_build(tmp_path, shape):
    # Rule E8: itemsize x the dims (zeros counted as ones) < 2**62, so the
    # writer never makes a file its own readers refuse.
    with ls.Writer(tmp_path / "model.lzy") as w:
        w.add("ok", np.zeros((0, 2**40), np.float64))
        with pytest.raises(ls.InvalidInputError, match="'x'.*2\\*\\*62"):
            w.add_pieces("x", [], dtype=np.float64, shape=shape)
    with ls.open(tmp_path / "model.lzy") as ck:
        assert list(ck) == ["ok"] and ck["ok"].shape == (0, 2**40)


def test_writer_refuses_metadata_its_readers_would_not_parse(old_file, monkeypatch):
    # docs/format.md §11.6 (the bounds shrunk: see tests/_core/test_strict_json.py)
    from lazystore._core import strict_json

    monkeypatch.setattr(strict_json, "MAX_VALUES", 1000)
    path, old_bytes = old_file
    with pytest.raises(ls.InvalidInputError, match="metadata too large.*JSON values"):
        ls.save({"new": np.zeros(3)}, path, metadata={"history": list(range(1000))})
    assert_old_file_intact(path, old_bytes)
    ls.save({"new": np.zeros(3)}, path, metadata={"history": list(range(990))})
    with ls.open(path) as ck:
        assert ck.metadata["history"] == list(range(990))


def test_writer_into_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        ls.Writer(tmp_path / "no" / "such" / "model.lzy")


def test_arrays_are_written_when_added(tmp_path):
    # The writer streams: mutating an array after add() does not change the file.
    arr = np.zeros(1000, dtype=np.float64)
    path = tmp_path / "model.lzy"
    with ls.Writer(path) as w:
        w.add("a", arr)
        arr[:] = 1.0
        w.add("b", arr)
    with ls.open(path) as ck:
        assert same_bits(ck["a"], np.zeros(1000))
        assert same_bits(ck["b"], np.ones(1000))


# ---------------------------------------------------------------------------
# bounded memory while streaming
# ---------------------------------------------------------------------------

_STREAM_SCRIPT = textwrap.dedent(
    """
    import json, os, resource, sys
    import numpy as np
    import lazystore as ls

    path, compression, count, tensor_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    compression = None if compression == "none" else compression
    n = tensor_mib * (1 << 20) // 4
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ls.Writer(path, compression=compression) as w:
        for i in range(count):
            if compression is None:
                t = np.full(n, float(i), dtype=np.float32)
            else:
                # Compressible but not trivial: a few hundred distinct values.
                t = (np.arange(n, dtype=np.uint32) * np.uint32(2654435761) % np.uint32(251 + i)).astype(np.float32)
            w.add(f"layer.{i}", t)
            del t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with ls.open(path) as ck:
        info = ck.info(f"layer.{count - 1}")
        result = dict(
            peak_kib=peak, base_kib=base_rss, size=os.path.getsize(path), tensors=len(ck),
            compression=info.compression, nbytes=ck.nbytes, stored=ck.stored_nbytes,
        )
    print(json.dumps(result))
    """
)
# Linux carries ru_maxrss across exec: a child of the test process (big once
# torch is imported) would report the test process's RSS. A small launcher in
# between gives the measured process a clean start (as benchmarks/measures.py).
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def _stream(tmp_path, compression, count, tensor_mib):
    path = tmp_path / "big.lzy"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _LAUNCHER, sys.executable, "-c", _STREAM_SCRIPT, str(path), compression or "none",
             str(count), str(tensor_mib)],
            capture_output=True, text=True, env=env, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert folder_entries(tmp_path) == ["big.lzy"]  # no temp file left
    finally:
        path.unlink(missing_ok=True)
    return result


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_streaming_1gib_raw_has_bounded_memory(tmp_path):
    count, mib = 64, 16
    r = _stream(tmp_path, None, count, mib)
    assert r["tensors"] == count
    assert r["nbytes"] == count * mib << 20
    assert r["size"] >= count * mib << 20
    assert r["compression"] is None
    peak_mib = r["peak_kib"] / 1024
    assert peak_mib < 250, f"peak RSS {peak_mib:.0f} MiB while writing 1 GiB (base {r['base_kib'] / 1024:.0f} MiB)"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_streaming_512mib_compressed_has_bounded_memory(tmp_path):
    count, mib = 32, 16
    r = _stream(tmp_path, "zstd", count, mib)
    assert r["tensors"] == count
    assert r["nbytes"] == count * mib << 20
    assert r["compression"] == "zstd"
    assert r["stored"] < r["nbytes"]
    peak_mib = r["peak_kib"] / 1024
    assert peak_mib < 250, f"peak RSS {peak_mib:.0f} MiB while writing 512 MiB (base {r['base_kib'] / 1024:.0f} MiB)"


@pytest.mark.slow
def test_a_killed_writers_partial_file_is_removed_by_the_next_save(tmp_path):
    code = (
        "import os, sys, numpy as np, lazystore as ls\n"
        "w = ls.Writer(sys.argv[1])\n"
        "w.add('a', np.zeros(1000))\n"
        "os._exit(9)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.lzy")], timeout=120)
    assert proc.returncode == 9
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".a.lzy.") and left[0].endswith(".partial")
    ls.save({"x": np.ones(3)}, tmp_path / "b.lzy")  # another target, same folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.lzy"]


def test_a_live_writers_partial_file_is_left_alone(tmp_path):
    with ls.Writer(tmp_path / "a.lzy") as w:
        w.add("a", np.zeros(1000))
        ls.save({"x": np.ones(3)}, tmp_path / "b.lzy")  # must not delete w's partial file
        w.add("b", np.ones(10))
    with ls.open(tmp_path / "a.lzy") as ck:
        assert list(ck) == ["a", "b"]
