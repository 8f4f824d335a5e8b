"""lazystore.numpy against safetensors.numpy: the same functions, names and
answers (docs/torch.md lists the differences)."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

import lazystore as ls
import lazystore.numpy as lsn

st_numpy = pytest.importorskip("safetensors.numpy")


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "w": rng.standard_normal((5, 3)).astype(np.float32),
        "b": np.arange(7, dtype=np.int64),
        "flag": np.asarray(False),
        "empty": np.zeros((0, 4), dtype=np.float16),
        "u": np.arange(6, dtype=np.uint8).reshape(2, 3),
    }


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name, a in want.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape, name
        np.testing.assert_array_equal(got[name], a, err_msg=name)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_file_round_trip(tmp_path, compression):
    ref = arrays()
    lsn.save_file(ref, tmp_path / "a.lzy", metadata={"format": "np"}, compression=compression)
    got = lsn.load_file(tmp_path / "a.lzy")
    assert_same(got, ref)
    assert list(got) == list(ref)  # the file's order, which is the dict's
    with ls.safe_open(tmp_path / "a.lzy", framework="np") as f:
        assert f.metadata() == {"format": "np"}
    got["w"][0, 0] = 42.0  # writable, and never written back
    assert lsn.load_file(tmp_path / "a.lzy")["w"][0, 0] == ref["w"][0, 0]


def test_reads_what_safetensors_numpy_writes_as_it_does(tmp_path):
    ref = arrays()
    st_numpy.save_file(ref, tmp_path / "ref.safetensors")
    ours, theirs = lsn.load_file(tmp_path / "ref.safetensors"), st_numpy.load_file(tmp_path / "ref.safetensors")
    assert_same(ours, theirs)
    assert list(ours) == list(theirs)  # both in the file's order
    data = st_numpy.save(ref)
    assert_same(lsn.load(data), st_numpy.load(data))


def test_bytes_round_trip():
    ref = arrays()
    data = lsn.save(ref, metadata={"k": "v"})
    assert isinstance(data, bytes)
    got = lsn.load(data)
    assert_same(got, ref)
    got["b"][:] = -1  # writable, owning its memory: the bytes stay as they were
    assert_same(lsn.load(data), ref)
    assert ls.load(io.BytesIO(data)).keys() == ref.keys()


def test_stores_values_whatever_the_layout():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    big = np.arange(4, dtype=">i4")
    got = lsn.load(lsn.save({"t": a.T, "big": big}))
    np.testing.assert_array_equal(got["t"], a.T)  # the values, not the memory
    assert got["big"].dtype == np.dtype("<i4") and got["big"].tolist() == [0, 1, 2, 3]


def test_bad_input(tmp_path):
    for bad, words in [({"a": [1, 2]}, "not a numpy.ndarray"), ({"a": np.float32(1)}, "not a numpy.ndarray"),
                       ({1: np.ones(2)}, "names must be str"), ([np.ones(2)], "expected a dict")]:
        with pytest.raises(ls.InvalidInputError, match=words):
            lsn.save_file(bad, tmp_path / "x.lzy")
        assert not (tmp_path / "x.lzy").exists()
    with pytest.raises(ls.InvalidInputError, match="bytes"):
        lsn.load("not bytes")
    with pytest.raises(ls.InvalidInputError, match="backend"):
        lsn.load_file(tmp_path / "x.lzy", backend="other")


def test_missing_file_as_safetensors_words_it(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError) as theirs:
        st_numpy.load_file(missing)
    with pytest.raises(FileNotFoundError) as ours:
        lsn.load_file(missing)
    assert str(ours.value) == str(theirs.value)


def test_pread_backend_gives_the_same(tmp_path):
    ref = arrays()
    lsn.save_file(ref, tmp_path / "a.lzy")
    assert_same(lsn.load_file(tmp_path / "a.lzy", backend="pread"), ref)


def test_threads_saving_and_loading_at_once(tmp_path):
    ref = arrays()
    errors = []
    barrier = threading.Barrier(4)

    def worker(i: int) -> None:
        try:
            barrier.wait()
            for j in range(5):
                path = tmp_path / f"{i}-{j}.lzy"
                lsn.save_file(ref, path)
                assert_same(lsn.load_file(path), ref)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which fails the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.slow
def test_imports_no_torch(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"  # as if PyTorch were not installed
            "import numpy as np, lazystore.numpy as lsn\n"
            "lsn.save_file({'a': np.arange(3)}, 'a.lzy')\n"
            "assert lsn.load(lsn.save(lsn.load_file('a.lzy')))['a'].tolist() == [0, 1, 2]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
