"""CheckpointView: Mapping behaviour, info, select, verify, closing, get_slice, threads."""

from __future__ import annotations

import gc
import threading
from collections.abc import KeysView, Mapping

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore.interop import ShardedWriter
from lazystore.testing.strategies import random_array, reaches_mmap, same_bits


# Insertion order deliberately not sorted.
def make_tensors():
    return {
        "z.last": np.arange(12, dtype=np.float32).reshape(3, 4),
        "layer.1.weight": random_array(np.float32, (40, 30), 1, "bits", 0.1),
        "a.first": np.array(7, dtype=np.int64),
        "layer.0.weight": random_array(np.float16, (20, 10), 2, "pool"),
        "layer.0.bias": np.zeros((0,), dtype=np.float64),
        "compressed": (np.arange(20000, dtype=np.int32) % 13).reshape(200, 100),
    }


@pytest.fixture
def tensors():
    return make_tensors()


@pytest.fixture
def path(tmp_path, tensors):
    p = tmp_path / "ck.lzy"
    with ls.Writer(p, metadata={"epoch": 3}, chunk_bytes=1024) as w:
        for name, arr in tensors.items():
            w.add(name, arr, compression="zstd" if name == "compressed" else None)
    return p


# ---------------------------------------------------------------------------
# Mapping
# ---------------------------------------------------------------------------


def test_mapping_behaviour(path, tensors):
    with ls.open(path) as ck:
        assert isinstance(ck, Mapping)
        assert isinstance(ck, ls.CheckpointView)
        assert len(ck) == len(tensors)
        assert list(ck) == list(tensors)  # insertion order, not sorted
        assert list(ck.keys()) == list(tensors)
        assert isinstance(ck.keys(), KeysView)
        assert [k for k, _ in ck.items()] == list(tensors)
        for (k, v), want in zip(ck.items(), tensors.values()):
            assert same_bits(v, want), k
        for v, want in zip(ck.values(), tensors.values()):
            assert same_bits(v, want)
        for name in tensors:
            assert name in ck
            assert name in ck.keys()
        assert "missing" not in ck
        assert "layer.0" not in ck
        assert 3 not in ck
        assert ck.get("missing") is None
        assert ck.get("missing", 5) == 5
        assert same_bits(ck.get("a.first"), tensors["a.first"])
        assert dict(ck).keys() == tensors.keys()
        assert ck.metadata == {"epoch": 3}
        assert ck.info("compressed").compression == "zstd"


@pytest.mark.parametrize("bad", ["missing", "", "LAYER.0.BIAS", "layer.*"])
def test_missing_key(path, bad):
    with ls.open(path) as ck:
        with pytest.raises(ls.TensorNotFoundError):
            ck[bad]
        with pytest.raises(KeyError):
            ck[bad]
        with pytest.raises(KeyError):
            ck.info(bad)
        with pytest.raises(KeyError):
            ck.get_slice(bad)
        with pytest.raises(KeyError):
            ck.load([bad])
        with pytest.raises(KeyError):
            ls.load(path, [bad])


def test_missing_key_of_odd_type(path):
    with ls.open(path) as ck:
        with pytest.raises(KeyError):
            ck[0]
        with pytest.raises(KeyError):
            ck[None]


def test_empty_checkpoint(tmp_path):
    p = tmp_path / "empty.lzy"
    ls.save({}, p)
    with ls.open(p) as ck:
        assert len(ck) == 0 and list(ck) == []
        assert ck.verify() == []
        assert ck.load() == {}
    assert ls.load(p) == {}


# ---------------------------------------------------------------------------
# info
# ---------------------------------------------------------------------------


def test_info_matches_and_does_not_read_data(path, tensors):
    with ls.open(path) as ck:
        infos = {n: ck.info(n) for n in ck}
    for name, arr in tensors.items():
        info = infos[name]
        assert isinstance(info, ls.TensorInfo)
        assert info.name == name
        assert info.dtype == arr.dtype
        assert info.shape == arr.shape
        assert info.nbytes == arr.nbytes
        assert info.offset % 64 == 0
        if name == "compressed":
            assert info.compression == "zstd" and 0 < info.stored_nbytes < info.nbytes
        else:
            assert info.compression is None and info.stored_nbytes == info.nbytes
    assert infos["layer.1.weight"].chunk_count > 1
    assert infos["layer.0.bias"].chunk_count == 0
    assert infos["a.first"].chunk_count == 1

    # Corrupt every data byte of two tensors: info does not look at data,
    # so it is unchanged, while reading the data notices.
    blob = bytearray(path.read_bytes())
    for name in ("compressed", "layer.1.weight"):
        i = infos[name]
        for off in range(i.offset, i.offset + i.stored_nbytes):
            blob[off] ^= 0x5A
    path.write_bytes(bytes(blob))
    with ls.open(path) as ck:
        assert ck.info("compressed") == infos["compressed"]
        assert ck.info("layer.1.weight") == infos["layer.1.weight"]
        with pytest.raises(ls.ChecksumError):
            ck["compressed"]
        assert sorted(ck.verify()) == ["compressed", "layer.1.weight"]
    with ls.open(path, verify=True) as ck:
        with pytest.raises(ls.ChecksumError):
            ck["layer.1.weight"]
        assert same_bits(ck["z.last"], tensors["z.last"])


def test_alignment_option(tmp_path, tensors):
    p = tmp_path / "a.lzy"
    ls.save(tensors, p, alignment=4096)
    with ls.open(p) as ck:
        for name in ck:
            assert ck.info(name).offset % 4096 == 0
            assert same_bits(ck[name], tensors[name])
        assert ck.verify() == []


# ---------------------------------------------------------------------------
# select
# ---------------------------------------------------------------------------


def test_select_glob(path, tensors):
    with ls.open(path) as ck:
        sub = ck.select("layer.*")
        assert list(sub) == ["layer.1.weight", "layer.0.weight", "layer.0.bias"]
        assert len(sub) == 3
        assert "z.last" not in sub
        with pytest.raises(KeyError):
            sub["z.last"]
        for name in sub:
            assert same_bits(sub[name], tensors[name])
        assert list(ck.select("layer.?.weight")) == ["layer.1.weight", "layer.0.weight"]
        assert list(ck.select("*")) == list(tensors)
        with pytest.raises(ls.TensorNotFoundError):
            ck.select("nothing*")
        assert sub.verify() == []
        assert set(sub.load()) == set(sub)
        # The parent is unchanged.
        assert list(ck) == list(tensors)


def test_select_list(path, tensors):
    with ls.open(path) as ck:
        sub = ck.select(["compressed", "a.first"])
        assert list(sub) == ["compressed", "a.first"]
        assert same_bits(sub["compressed"], tensors["compressed"])
        assert same_bits(sub.get_slice("compressed")[5:7, ::3], tensors["compressed"][5:7, ::3])
        with pytest.raises(KeyError):
            sub["z.last"]
        with pytest.raises(KeyError):
            ck.select(["compressed", "missing"])
        with pytest.raises(ls.TensorNotFoundError):
            ck.select(("missing",))
        assert list(ck.select([])) == []


def test_close_selection_keeps_parent_open(path, tensors):
    ck = ls.open(path)
    sub = ck.select(["z.last"])
    sub.close()  # closing the selection does not close the parent
    with pytest.raises(ls.ClosedError):
        sub["z.last"]
    assert same_bits(ck["z.last"], tensors["z.last"])
    ck.close()


@pytest.mark.parametrize("name", ["z.last", "compressed"])
def test_selection_of_closed_parent_raises_closed_error(path, name):
    # The parent owns the file: once it is closed, reading through a
    # selection must be a ClosedError, not a low-level error.
    with ls.open(path) as ck:
        sub = ck.select("*")
    with pytest.raises(ls.ClosedError):
        sub[name]
    with pytest.raises(ls.ClosedError):
        sub.load([name])


def test_load_subsets(path, tensors):
    out = ls.load(path, ["compressed", "a.first"])
    assert list(out) == ["compressed", "a.first"]
    out = ls.load(path, "layer.0.*")
    assert sorted(out) == ["layer.0.bias", "layer.0.weight"]
    for k, v in out.items():
        assert same_bits(v, tensors[k]) and v.flags.writeable


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


def test_verify_fresh_file(path):
    with ls.open(path) as ck:
        assert ck.verify() == []
        assert ck.verify(["compressed"]) == []
        assert ck.verify("layer.*") == []
    with ls.open(path, verify=True) as ck:
        assert ck.verify() == []
        for name in ck:
            ck[name]


def test_verify_names_the_corrupt_tensor(path):
    with ls.open(path) as ck:
        info = ck.info("z.last")
    blob = bytearray(path.read_bytes())
    blob[info.offset + 5] ^= 1
    path.write_bytes(bytes(blob))
    with ls.open(path) as ck:
        assert ck.verify() == ["z.last"]
        assert ck.verify(["compressed"]) == []


@pytest.mark.slow
def test_verify_of_many_small_tensors_names_each_corrupt_one(tmp_path):
    # verify() checks small tensors in batches (one pool task each): a
    # damaged tensor or padding anywhere in a batch is still named alone.
    path = tmp_path / "many.lzy"
    # Every 50th tensor is 1 MiB, so the 600 tensors span several batches.
    tensors = {f"t.{i:04d}": np.full(3 if i % 50 else 1 << 18, i, dtype=np.float32) for i in range(600)}
    ls.save(tensors, path)
    with ls.open(path) as ck:
        infos = {n: ck.info(n) for n in ("t.0000", "t.0301", "t.0599")}
    blob = bytearray(path.read_bytes())
    blob[infos["t.0000"].offset] ^= 1
    blob[infos["t.0301"].offset + 12] ^= 1  # the padding after its 12 bytes
    blob[infos["t.0599"].offset + 11] ^= 1
    path.write_bytes(bytes(blob))
    with ls.open(path) as ck:
        assert ck.verify() == ["t.0000", "t.0301", "t.0599"]
        assert ck.verify(["t.0300", "t.0302"]) == []


# ---------------------------------------------------------------------------
# closing
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_context_manager_closes_but_arrays_stay_valid(path, tensors):
    with ls.open(path) as ck:
        raw = ck["layer.1.weight"]
        comp = ck["compressed"]
        part = ck.get_slice("layer.1.weight")[3:9, ::2]
        cpart = ck.get_slice("compressed")[10:20]
        handle = ck.get_slice("z.last")
        scalar = ck["a.first"]
        assert reaches_mmap(raw)
    for call in (
        lambda: ck["z.last"],
        lambda: ck.info("z.last"),
        lambda: ck.get_slice("z.last"),
        lambda: handle[0],
        lambda: ck.verify(),
        lambda: ck.load(),
        lambda: ck.select(["z.last"]),
        lambda: list(ck),
    ):
        with pytest.raises(ls.ClosedError):
            call()
    # Selecting from a closed view is refused too.
    with pytest.raises(ls.ClosedError):
        ck.select("*")["z.last"]
    assert issubclass(ls.ClosedError, ls.LazyStoreError)
    ck.close()  # closing twice is fine

    ck = None  # drops the last reference (the lambdas above ran while it was open)
    gc.collect()
    assert same_bits(raw, tensors["layer.1.weight"])
    assert same_bits(comp, tensors["compressed"])
    assert same_bits(part, tensors["layer.1.weight"][3:9, ::2])
    assert same_bits(cpart, tensors["compressed"][10:20])
    assert same_bits(scalar, tensors["a.first"])


def test_explicit_close(path, tensors):
    ck = ls.open(path)
    a = ck["z.last"]
    ck.close()
    with pytest.raises(ls.ClosedError):
        ck["z.last"]
    assert same_bits(a, tensors["z.last"])


def test_view_survives_file_replacement(path, tensors):
    with ls.open(path) as ck:
        ls.save({"z.last": np.full((3, 4), -1.0, dtype=np.float32)}, path)
        # The open view still reads the file it opened.
        assert same_bits(ck["z.last"], tensors["z.last"])
        assert same_bits(ck["compressed"], tensors["compressed"])
    with ls.open(path) as ck:
        assert list(ck) == ["z.last"]
        assert float(ck["z.last"][0, 0]) == -1.0


def test_open_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        ls.open(tmp_path / "nope.lzy")
    with pytest.raises(FileNotFoundError):
        ls.load(tmp_path / "nope.lzy")


@pytest.mark.parametrize("content", [b"", b"hello", b"\0" * 200, b"\x89LZY\r\n\x1a\n" + b"\0" * 100])
def test_open_non_checkpoint(tmp_path, content):
    p = tmp_path / "junk.lzy"
    p.write_bytes(content)
    with pytest.raises(ls.FormatError):
        ls.open(p)


def test_open_accepts_str_and_pathlike(path):
    for p in (path, str(path)):
        with ls.open(p) as ck:
            assert "z.last" in ck


# ---------------------------------------------------------------------------
# get_slice
# ---------------------------------------------------------------------------


def test_get_slice_on_raw_is_a_view(path, tensors):
    with ls.open(path) as ck:
        sl = ck.get_slice("layer.1.weight")
        assert isinstance(sl, ls.TensorSlice)
        assert sl.shape == (40, 30) and sl.dtype == np.float32 and sl.ndim == 2
        assert len(sl) == 40
        part = sl[5:10, 2:20:3]
        assert not part.flags.writeable
        assert np.shares_memory(part, ck["layer.1.weight"])
        assert reaches_mmap(part)
        assert same_bits(part, tensors["layer.1.weight"][5:10, 2:20:3])


def test_get_slice_on_compressed_is_a_new_array(path, tensors):
    with ls.open(path) as ck:
        part = ck.get_slice("compressed")[3:7, ::-5]
        assert not reaches_mmap(part)
        assert same_bits(part, tensors["compressed"][3:7, ::-5])
        # A slice does not keep the whole decoded tensor alive.
        base = part
        while isinstance(base.base, np.ndarray):
            base = base.base
        assert base.nbytes < tensors["compressed"].nbytes


OUT_OF_RANGE = [
    ("layer.1.weight", 40),
    ("layer.1.weight", -41),
    ("layer.1.weight", 10**6),
    ("layer.1.weight", (0, 30)),
    ("layer.1.weight", (0, -31)),
    ("layer.1.weight", (slice(None), 30)),
    ("layer.1.weight", (Ellipsis, 30)),
    ("layer.1.weight", (0, 0, 0)),
    ("compressed", 200),
    ("compressed", -201),
    ("compressed", (5, 100)),
    ("compressed", (None, slice(None), -101)),
    ("compressed", (0, 0, 0)),
    ("a.first", 0),
]


@pytest.mark.parametrize("name,index", OUT_OF_RANGE, ids=repr)
def test_get_slice_out_of_range(path, tensors, name, index):
    with pytest.raises(IndexError):
        tensors[name][index]  # numpy agrees that it is out of range
    with ls.open(path) as ck:
        with pytest.raises(ls.InvalidSelectionError):
            ck.get_slice(name)[index]
        with pytest.raises(IndexError):
            ck.get_slice(name)[index]


def test_get_slice_int_on_zero_length_axis(path):
    with ls.open(path) as ck:
        with pytest.raises(IndexError):
            ck.get_slice("layer.0.bias")[0]
        assert ck.get_slice("layer.0.bias")[:].shape == (0,)


def test_get_slice_on_0d(path, tensors):
    with ls.open(path) as ck:
        sl = ck.get_slice("a.first")
        assert sl.ndim == 0 and sl.shape == ()
        assert same_bits(sl[()], tensors["a.first"][()])
        assert same_bits(sl[...], tensors["a.first"][...])
        assert same_bits(sl[None], tensors["a.first"][None])
        with pytest.raises(IndexError):
            sl[0]
        with pytest.raises(TypeError):
            len(sl)


ADVANCED = {
    "list": [0, 1],
    "list_in_tuple": (0, [1, 2]),
    "int_array": np.array([0, 2]),
    "int_array_in_tuple": (slice(None), np.array([1, 3])),
    "bool_array": np.ones(40, dtype=bool),
    "bool_array_2d": np.ones((40, 30), dtype=bool),
    "bool_true": True,
    "bool_false_in_tuple": (0, False),
    "numpy_bool": np.True_,
    "float": 1.5,
    "str": "a",
    "two_ellipses": (Ellipsis, 0, Ellipsis),
}


@pytest.mark.parametrize("name", ["layer.1.weight", "compressed"])
@pytest.mark.parametrize("index", list(ADVANCED.values()), ids=list(ADVANCED))
def test_get_slice_rejects_advanced_indexing(path, name, index):
    with ls.open(path) as ck:
        with pytest.raises(ls.InvalidSelectionError):
            ck.get_slice(name)[index]


# ---------------------------------------------------------------------------
# threads
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_reads_from_8_threads(tmp_path):
    rng = np.random.default_rng(11)
    tensors = {
        "raw": random_array(np.float32, (256, 64), 5, "bits", 0.05),
        "zstd": (rng.integers(0, 8, size=(256, 64))).astype(np.int32),
        "bf16": random_array(ml_dtypes.bfloat16, (64, 33), 9, "pool"),
        "small": np.arange(10, dtype=np.int8),
    }
    p = tmp_path / "ck.lzy"
    with ls.Writer(p, chunk_bytes=512) as w:
        w.add("raw", tensors["raw"])
        w.add("zstd", tensors["zstd"], compression="zstd")
        w.add("bf16", tensors["bf16"], compression="zstd")
        w.add("small", tensors["small"])
    with ls.open(p, verify=True) as ck:
        assert ck.info("zstd").compression == "zstd"
        assert ck.info("zstd").chunk_count > 8
        _hammer(ck, tensors, can_verify=True, rounds=15)


def _hammer(ck, tensors: dict, *, can_verify: bool, n_threads: int = 8, rounds: int = 12) -> None:
    """8 threads at once on one view: ``[]``, get_slice (ranges, steps, single
    rows), verify and load, each result compared with the source arrays."""
    errors: list = []
    barrier = threading.Barrier(n_threads)

    def worker(tid: int):
        try:
            r = np.random.default_rng(100 + tid)
            barrier.wait()
            for i in range(rounds):
                for name in r.permutation(list(tensors)):
                    arr = tensors[name]
                    assert same_bits(ck[name], arr), (tid, name)
                    lo = int(r.integers(0, arr.shape[0]))
                    hi = int(r.integers(lo, arr.shape[0] + 1))
                    step = int(r.integers(1, 4))
                    assert same_bits(ck.get_slice(name)[lo:hi:step], arr[lo:hi:step]), (tid, name)
                    row = (lo, Ellipsis, slice(None, 3)) if arr.ndim >= 2 else (lo,)
                    assert same_bits(ck.get_slice(name)[row], arr[row]), (tid, name)
                if can_verify and i % 3 == tid % 3:
                    assert ck.verify() == []
                got = ck.load(list(r.permutation(list(tensors))[:2]))
                assert all(same_bits(a, tensors[n]) for n, a in got.items()), tid
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append((tid, repr(exc)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a reader thread hung"
    assert errors == []


def _thread_tensors():
    rng = np.random.default_rng(12)
    return {
        "raw": random_array(np.float32, (192, 48), 5, "bits", 0.05),
        "zstd": (rng.integers(0, 8, size=(256, 40))).astype(np.int32),
        "bf16": random_array(ml_dtypes.bfloat16, (64, 33), 9, "pool"),
        "i8": rng.integers(-100, 100, size=(300, 7)).astype(np.int8),
    }


@pytest.mark.slow
@pytest.mark.parametrize("verify", [False, True], ids=["plain", "verify-on-access"])
@pytest.mark.parametrize("kind", ["lazystore", "sharded", "safetensors-lazystore", "safetensors-plain"])
def test_concurrent_mixed_reads_on_every_kind_of_view(tmp_path, kind, verify):
    # One view, 8 threads mixing [], get_slice, verify and load, on raw and
    # compressed tensors (lazystore file and shards), and on safetensors
    # files with and without lazystore's checksums.
    import safetensors.numpy as stnp

    tensors = _thread_tensors()
    compression = {"zstd": "zstd", "bf16": "zstd"}
    p = tmp_path / "ck"
    if kind in ("lazystore", "sharded"):
        w = ls.Writer(p, chunk_bytes=512) if kind == "lazystore" else \
            ShardedWriter(p, max_shard_size=20_000, chunk_bytes=512)
        with w:
            for name, arr in tensors.items():
                w.add(name, arr, compression=compression.get(name))
    elif kind == "safetensors-lazystore":
        from lazystore.interop.safetensors import SafetensorsWriter

        with SafetensorsWriter(p) as w:
            for name, arr in tensors.items():
                w.add(name, arr)
    else:
        stnp.save_file(tensors, str(p))
    if kind == "safetensors-plain" and verify:  # nothing to verify against: refused, as verify() is
        with pytest.raises(ls.VerificationUnavailableError):
            ls.open(p, verify=True)
        return
    with ls.open(p, verify=verify) as ck:
        if kind == "lazystore":
            assert ck.info("zstd").compression == "zstd" and ck.info("zstd").chunk_count > 8
        if kind == "sharded":
            assert len(ck.shards) >= 3 and ck.info("bf16").compression == "zstd"
        _hammer(ck, tensors, can_verify=kind != "safetensors-plain")
