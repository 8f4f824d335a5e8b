"""Save -> open -> read gives back exactly what was saved."""

from __future__ import annotations

import io
import math
import typing
import warnings
import zlib

import ml_dtypes
import numpy as np
import pytest

import lazystore as ls
from lazystore.testing.strategies import DTYPE_LIST, random_array, reaches_mmap, same_bits

COMPRESSIONS = [None, "zstd"]

# (shape, chunk_bytes): chunk_bytes=64 cuts the multi-chunk shapes into many chunks.
SHAPES = [
    ((), 1 << 20),
    ((0,), 1 << 20),
    ((3, 0, 2), 1 << 20),
    ((7,), 1 << 20),
    ((5, 3), 1 << 20),
    ((2, 3, 4), 1 << 20),
    ((33, 17), 64),
    ((5, 6, 7), 64),
]


def _id(v):
    if isinstance(v, np.dtype):
        return v.name
    return repr(v)






def is_little_endian(dtype: np.dtype) -> bool:
    return dtype.byteorder == "|" or dtype.byteorder == "<" or (dtype.byteorder == "=" and np.little_endian)


# ---------------------------------------------------------------------------
# every dtype x shape x compression
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=["raw", "zstd"])
@pytest.mark.parametrize("shape,chunk_bytes", SHAPES, ids=[f"{s}-{c}" for s, c in SHAPES])
@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=_id)
def test_roundtrip_every_dtype_and_shape(tmp_path, dtype, shape, chunk_bytes, compression):
    seed = zlib.crc32(f"{dtype.name}{shape}".encode())
    tensors = {
        "bits": random_array(dtype, shape, seed, "bits", 0.2),
        "pool": random_array(dtype, shape, seed + 1, "pool", 0.1),
    }
    path = tmp_path / "ck.lzy"
    ls.save(tensors, path, compression=compression, chunk_bytes=chunk_bytes)

    with ls.open(path) as ck:
        assert list(ck) == list(tensors)
        for name, arr in tensors.items():
            info = ck.info(name)
            assert info.dtype == dtype
            assert info.shape == shape
            assert info.nbytes == arr.nbytes
            if math.prod(shape) and chunk_bytes == 64 and math.prod(shape) * dtype.itemsize > 64:
                assert info.chunk_count > 1
            out = ck[name]
            assert isinstance(out, np.ndarray)
            assert out.dtype == dtype and out.shape == shape
            assert same_bits(out, arr), name
            assert out.flags.c_contiguous
            if info.compression is None:
                assert not out.flags.writeable
            assert same_bits(ck.get_slice(name)[...], arr)
        loaded = ck.load()
    for name, arr in tensors.items():
        assert same_bits(loaded[name], arr)

    loaded = ls.load(path)
    assert list(loaded) == list(tensors)
    for name, arr in tensors.items():
        assert same_bits(loaded[name], arr)
        assert loaded[name].flags.writeable


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=_id)
def test_compressible_multi_chunk_tensor_is_compressed_and_exact(tmp_path, dtype):
    # Low-entropy data big enough that byte-plane zstd pays off, cut into many chunks.
    arr = random_array(dtype, (64, 300), 7, "pool", 0.05)
    path = tmp_path / "ck.lzy"
    ls.save({"t": arr}, path, compression="zstd", chunk_bytes=4096)
    with ls.open(path) as ck:
        info = ck.info("t")
        assert info.compression == "zstd"
        assert info.stored_nbytes < info.nbytes
        assert info.chunk_count > 1
        assert same_bits(ck["t"], arr)
    assert same_bits(ls.load(path)["t"], arr)


# ---------------------------------------------------------------------------
# ownership: raw reads are read-only views of the map, load() copies
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=["raw", "zstd"])
def test_load_returns_private_writable_arrays(tmp_path, compression):
    arr = np.arange(4096, dtype=np.float32).reshape(64, 64) % 5  # compressible
    path = tmp_path / "ck.lzy"
    ls.save({"w": arr, "s": np.float64(3.5), "e": np.zeros((2, 0))}, path, compression=compression)
    before = path.read_bytes()
    loaded = ls.load(path)
    w = loaded["w"]
    assert w.flags.writeable
    # Raw tensors are copy-on-write views of the file (nothing copied up
    # front); compressed ones are decoded into arrays of their own.
    assert reaches_mmap(w) == (compression is None)
    assert loaded["s"].shape == () and loaded["s"].flags.writeable and float(loaded["s"]) == 3.5
    assert loaded["e"].shape == (2, 0)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # writing must not even warn
        w[...] = -1.0
        loaded["s"][()] = 0.0
    assert path.read_bytes() == before  # private pages: the file never changes
    assert same_bits(ls.load(path)["w"], arr)
    with ls.open(path) as ck:
        assert same_bits(ck["w"], arr)
        assert float(ck["s"]) == 3.5
        own = ck.load(["w"])["w"]
        own[0, 0] = 99
        assert same_bits(ck["w"], arr)
        assert not np.shares_memory(own, ck["w"])


def test_raw_getitem_is_a_read_only_view_of_the_map(tmp_path):
    arr = np.arange(1000, dtype=np.int32).reshape(10, 100)
    path = tmp_path / "ck.lzy"
    ls.save({"a": arr, "b": arr * 2}, path)
    with ls.open(path) as ck:
        assert ck.info("a").compression is None
        x, y = ck["a"], ck["a"]
        assert not x.flags.writeable
        assert np.shares_memory(x, y)
        assert reaches_mmap(x)
        assert not np.shares_memory(x, ck["b"])
        with pytest.raises(ValueError):
            x[0, 0] = 1
        assert same_bits(x, arr)


def test_compressed_getitem_is_a_new_array(tmp_path):
    arr = np.zeros((100, 100), dtype=np.float32)
    path = tmp_path / "ck.lzy"
    ls.save({"z": arr}, path, compression="zstd")
    with ls.open(path) as ck:
        assert ck.info("z").compression == "zstd"
        x, y = ck["z"], ck["z"]
        assert not np.shares_memory(x, y)
        assert not reaches_mmap(x)
        assert same_bits(x, arr)


# ---------------------------------------------------------------------------
# inputs in other layouts
# ---------------------------------------------------------------------------


def _layout_inputs():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((6, 8)).astype(np.float32)
    cplx = (rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))).astype(np.complex128)
    return {
        "big_endian_f4": base.astype(">f4"),
        "big_endian_i8": np.arange(-20, 20, dtype=">i8").reshape(5, 8),
        "big_endian_c16": cplx.astype(">c16"),
        "big_endian_0d": np.array(1.25, dtype=">f8"),
        "fortran": np.asfortranarray(base),
        "fortran_3d": np.asfortranarray(np.arange(60, dtype=np.int16).reshape(3, 4, 5)),
        "strided": base[::2, 1::3],
        "negative_stride": base[::-1, ::-2],
        "transposed": base.T,
        "broadcast": np.broadcast_to(np.arange(5, dtype=np.uint16), (4, 5)),
        "big_endian_strided": base.astype(">f4")[:, ::2],
    }


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=["raw", "zstd"])
def test_layouts_round_trip_to_c_contiguous_little_endian(tmp_path, compression):
    inputs = _layout_inputs()
    path = tmp_path / "ck.lzy"
    ls.save(inputs, path, compression=compression, chunk_bytes=64)
    with ls.open(path) as ck:
        for name, value in inputs.items():
            expected = np.asarray(value)
            out = ck[name]
            assert out.shape == expected.shape, name
            assert out.flags.c_contiguous, name
            assert is_little_endian(out.dtype), name
            assert out.dtype == expected.dtype.newbyteorder("<"), name
            # Same values (bit-for-bit after conversion to little-endian C order).
            want = np.asarray(expected, dtype=expected.dtype.newbyteorder("<"), order="C")
            assert same_bits(out, want), name
            assert np.array_equal(out, expected), name
    for name, value in inputs.items():
        loaded = ls.load(path, [name])[name]
        assert loaded.flags.c_contiguous and is_little_endian(loaded.dtype)
        assert np.array_equal(loaded, np.asarray(value))


# ---------------------------------------------------------------------------
# compression decisions
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arr",
    [
        np.zeros((256, 256), dtype=np.float32),
        np.arange(100_000, dtype=np.int64),
        np.ones((1000,), dtype=ml_dtypes.bfloat16),
    ],
    ids=["zeros_f32", "arange_i64", "ones_bf16"],
)
def test_compressible_data_is_compressed(tmp_path, arr):
    path = tmp_path / "ck.lzy"
    ls.save({"t": arr}, path, compression="zstd")
    with ls.open(path) as ck:
        info = ck.info("t")
        assert info.compression == "zstd"
        assert info.stored_nbytes < info.nbytes
        assert info.nbytes == arr.nbytes
        assert same_bits(ck["t"], arr)
    # The whole file is smaller than the raw tensor.
    assert path.stat().st_size < arr.nbytes


def test_incompressible_data_stays_raw_and_zero_copy(tmp_path):
    arr = np.random.default_rng(0).integers(0, 256, size=(512, 1024), dtype=np.uint8)
    path = tmp_path / "ck.lzy"
    ls.save({"noise": arr}, path, compression="zstd")
    with ls.open(path) as ck:
        info = ck.info("noise")
        assert info.compression is None
        assert info.stored_nbytes == info.nbytes == arr.nbytes
        out = ck["noise"]
        assert not out.flags.writeable
        assert reaches_mmap(out)
        assert np.shares_memory(out, ck["noise"])
        assert same_bits(out, arr)


def test_compression_level_is_accepted(tmp_path):
    arr = np.arange(50_000, dtype=np.int32) % 7
    for level in (1, 9):
        path = tmp_path / f"l{level}.lzy"
        ls.save({"t": arr}, path, compression="zstd", compression_level=level)
        with ls.open(path) as ck:
            assert ck.info("t").compression == "zstd"
            assert same_bits(ck["t"], arr)


def test_per_tensor_compression_override(tmp_path):
    zeros = np.zeros((128, 128), dtype=np.float32)
    path = tmp_path / "ck.lzy"
    with ls.Writer(path, compression="zstd") as w:
        w.add("default", zeros)
        w.add("forced_raw", zeros, compression=None)
    with ls.Writer(tmp_path / "b.lzy") as w:
        w.add("default", zeros)
        w.add("forced_zstd", zeros, compression="zstd")
    with ls.open(path) as ck:
        assert ck.info("default").compression == "zstd"
        assert ck.info("forced_raw").compression is None
        assert ck.info("forced_raw").stored_nbytes == zeros.nbytes
        assert same_bits(ck["default"], zeros) and same_bits(ck["forced_raw"], zeros)
    with ls.open(tmp_path / "b.lzy") as ck:
        assert ck.info("default").compression is None
        assert ck.info("forced_zstd").compression == "zstd"
        assert same_bits(ck["forced_zstd"], zeros)


# ---------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------


def test_metadata_round_trips(tmp_path):
    meta = {
        "name": "llama-ish",
        "step": 12345,
        "big": 2**70,
        "lr": 3e-4,
        "neg": -0.5,
        "flags": [True, False, None],
        "nested": {"a": [1, 2, {"b": "c"}], "empty": {}, "list": []},
        "unicode": "héllo wörld ✓ 模型 🚀",
        "ключ": "значение",
        "": "empty key",
    }
    path = tmp_path / "ck.lzy"
    ls.save({"x": np.zeros(3)}, path, metadata=meta)
    with ls.open(path) as ck:
        assert ck.metadata == meta
    with ls.Writer(tmp_path / "w.lzy", metadata=meta) as w:
        w.add("x", np.ones(2))
    with ls.open(tmp_path / "w.lzy") as ck:
        assert ck.metadata == meta


def test_no_metadata_is_empty_dict(tmp_path):
    path = tmp_path / "ck.lzy"
    ls.save({"x": np.zeros(3)}, path)
    with ls.open(path) as ck:
        assert ck.metadata == {}


@pytest.mark.parametrize(
    "meta",
    [{"lr": float("nan")}, {"nested": {"x": [1.0, float("inf")]}}, {"x": -float("inf")}, {"obj": object()}],
    ids=["nan", "nested_inf", "neg_inf", "object"],
)
def test_bad_metadata_is_rejected(tmp_path, meta):
    path = tmp_path / "ck.lzy"
    with pytest.raises(ls.InvalidInputError):
        ls.save({"x": np.zeros(3)}, path, metadata=meta)
    with pytest.raises(ls.InvalidInputError):
        ls.Writer(tmp_path / "w.lzy", metadata=meta)
    assert list(tmp_path.iterdir()) == []


def test_metadata_that_is_not_utf8_encodable_is_invalid_input(tmp_path):
    # A lone surrogate cannot be encoded as UTF-8: that is bad input, like NaN.
    with pytest.raises(ls.InvalidInputError):
        ls.save({"x": np.zeros(3)}, tmp_path / "ck.lzy", metadata={"s": "\ud800"})
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# invalid input
# ---------------------------------------------------------------------------


UNSUPPORTED = {
    "object": np.array([object(), 1], dtype=object),
    "str": np.array(["a", "bc"]),
    "bytes": np.array([b"a", b"bc"]),
    "datetime64": np.array(["2020-01-01"], dtype="datetime64[D]"),
    "timedelta64": np.array([1], dtype="timedelta64[s]"),
    "structured": np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")]),
    "void": np.zeros(2, dtype="V4"),
}
if np.dtype(np.longdouble).itemsize > 8:
    UNSUPPORTED["longdouble"] = np.zeros(3, dtype=np.longdouble)


@pytest.mark.parametrize("value", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_unsupported_dtype(tmp_path, value):
    path = tmp_path / "ck.lzy"
    with pytest.raises(ls.UnsupportedDtypeError) as exc:
        ls.save({"x": value}, path)
    assert isinstance(exc.value, TypeError) and isinstance(exc.value, ls.LazyStoreError)
    with pytest.raises(ls.UnsupportedDtypeError):
        with ls.Writer(path) as w:
            w.add("x", value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", [b"bytes", None, ("a",), 1.5, True], ids=repr)
def test_non_str_key(tmp_path, key):
    # (int keys are valid in nested state: see tests/views/test_tree.py)
    with pytest.raises(ls.InvalidInputError):
        ls.save({key: np.zeros(2)}, tmp_path / "ck.lzy")
    with pytest.raises(ls.InvalidInputError):
        with ls.Writer(tmp_path / "w.lzy") as w:
            w.add(key, np.zeros(2))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", ["a\0b", "\0", "tail\0"], ids=repr)
def test_key_with_nul(tmp_path, key):
    with pytest.raises(ls.InvalidInputError):
        ls.save({key: np.zeros(2)}, tmp_path / "ck.lzy")
    assert list(tmp_path.iterdir()) == []


def test_key_that_is_not_utf8_encodable_is_invalid_input(tmp_path):
    # A lone surrogate is a str but cannot be stored as UTF-8; it must be
    # refused like a NUL, as bad input, not fail later with a codec error.
    with pytest.raises(ls.InvalidInputError):
        ls.save({"ok": np.zeros(2), "bad\ud800": np.zeros(2)}, tmp_path / "ck.lzy")
    assert list(tmp_path.iterdir()) == []


def test_unusual_but_valid_keys(tmp_path):
    tensors = {"": np.zeros(1), "ünï/cødé.🚀": np.ones(2), "a b\tc\n": np.arange(3), "x" * 1000: np.zeros(0)}
    path = tmp_path / "ck.lzy"
    ls.save(tensors, path)
    with ls.open(path) as ck:
        assert list(ck) == list(tensors)
        for k, v in tensors.items():
            assert same_bits(ck[k], v)


def test_duplicate_key(tmp_path):
    path = tmp_path / "ck.lzy"
    with pytest.raises(ls.InvalidInputError):
        with ls.Writer(path) as w:
            w.add("a", np.zeros(2))
            w.add("a", np.ones(2))
    assert list(tmp_path.iterdir()) == []
    # The writer rejects the duplicate without spoiling what came before.
    with ls.Writer(path) as w:
        w.add("a", np.zeros(2))
        with pytest.raises(ls.InvalidInputError):
            w.add("a", np.ones(2))
        w.add("b", np.ones(2))
    with ls.open(path) as ck:
        assert list(ck) == ["a", "b"]
        assert same_bits(ck["a"], np.zeros(2)) and same_bits(ck["b"], np.ones(2))


@pytest.mark.parametrize("compression", ["lz4", "ZSTD", "gzip", 3, True], ids=repr)
def test_unknown_compression(tmp_path, compression):
    with pytest.raises(ls.InvalidInputError):
        ls.save({"x": np.zeros(2)}, tmp_path / "ck.lzy", compression=compression)
    with pytest.raises(ls.InvalidInputError):
        ls.Writer(tmp_path / "w.lzy", compression=compression)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ls.InvalidInputError):
        with ls.Writer(tmp_path / "w.lzy") as w:
            w.add("x", np.zeros(2), compression=compression)
    assert list(tmp_path.iterdir()) == []


def test_save_requires_a_mapping_or_nested_state(tmp_path):
    # Lists and tuples are nested state (tests/views/test_tree.py); other objects are refused.
    for obj in (iter([("a", np.zeros(2))]), {"a", "b"}, object()):
        with pytest.raises(ls.InvalidInputError):
            ls.save(obj, tmp_path / "ck.lzy")
    assert list(tmp_path.iterdir()) == []


def test_invalid_input_errors_are_value_errors():
    assert issubclass(ls.InvalidInputError, ValueError)
    assert issubclass(ls.UnsupportedDtypeError, TypeError)
    assert issubclass(ls.TensorNotFoundError, KeyError)
    assert issubclass(ls.InvalidSelectionError, IndexError)
    for err in (ls.FormatError, ls.ChecksumError, ls.InvalidInputError, ls.ClosedError, ls.TensorNotFoundError):
        assert issubclass(err, ls.LazyStoreError)


# -- file objects, as torch.save and torch.load take them ---------------------------------


def test_file_objects_round_trip_nested_state(tmp_path):
    torch = pytest.importorskip("torch")
    state = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "opt": [np.ones(3, dtype=np.float16)], "step": 7}
    buf = io.BytesIO(b"head")
    buf.seek(4)  # written at the object's position, as torch.save writes
    ls.save(state, buf, compression="zstd", metadata={"run": "a"})
    buf.seek(4)
    got = ls.load(buf)
    assert got["step"] == 7 and torch.equal(got["model"]["w"], state["model"]["w"])
    np.testing.assert_array_equal(got["opt"][0], state["opt"][0])
    assert buf.getvalue()[:4] == b"head"
    with open(tmp_path / "c.lzy", "wb") as f:  # a real file too, then read by path
        ls.save(state, f)
    assert ls.load(tmp_path / "c.lzy")["step"] == 7
    with open(tmp_path / "c.lzy", "rb") as f, ls.open(f) as ck:
        assert ck.metadata == {} and sorted(ck) == ["model/w", "opt/0"]


def test_arrays_loaded_from_a_file_object_are_owned_and_checked():
    buf = io.BytesIO()
    ls.save({"a": np.arange(4.0)}, buf)
    data = bytearray(buf.getvalue())
    got = ls.load(io.BytesIO(data))["a"]
    got[:] = 0  # writable; the caller's bytes stay as they were
    assert ls.load(io.BytesIO(data))["a"].tolist() == [0, 1, 2, 3]
    at = bytes(data).find(np.arange(4.0).tobytes())
    data[at] ^= 1
    with pytest.raises(ls.ChecksumError):
        ls.load(io.BytesIO(data))


def test_file_objects_are_refused_clearly(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="binary file object"):
        ls.save({"a": np.ones(2)}, io.StringIO())
    with pytest.raises(ls.InvalidInputError, match="binary file object"):
        ls.load(io.StringIO("text"))
    with open(tmp_path / "r.lzy", "wb") as f:
        f.write(b"x")
    with open(tmp_path / "r.lzy", "rb") as f, pytest.raises(ls.InvalidInputError, match="binary file object to write"):
        ls.save({"a": np.ones(2)}, f)  # refused before anything is written
    for bad in ({"max_shard_size": 1 << 20}, {"base": tmp_path / "b.lzy"}):
        with pytest.raises(ls.InvalidInputError, match="one file, written before save returns"):
            ls.save({"a": np.ones(2)}, io.BytesIO(), **bad)
    with pytest.raises(ls.InvalidInputError, match="save_async need a path"):
        ls.save_async({"a": np.ones(2)}, io.BytesIO())
    ls.save({"a": np.ones(4)}, tmp_path / "base.lzy")
    ls.save({"a": np.ones(4)}, tmp_path / "delta.lzy", base=tmp_path / "base.lzy")
    with open(tmp_path / "delta.lzy", "rb") as f, pytest.raises(ls.BaseCheckpointError, match="delta"):
        ls.load(f)  # its base is a file beside it; bytes are beside nothing


@pytest.mark.parametrize("cut", ["half", "preamble only", "empty"])
def test_a_file_cut_short_is_refused_naming_it(tmp_path, cut):
    # Reported by the accelerate work: "bad magic at end of file" named no file,
    # so a user loading a folder of shards could not tell which one was cut.
    ls.save({"a": np.arange(100.0)}, tmp_path / "whole.lzy")
    data = (tmp_path / "whole.lzy").read_bytes()
    short = tmp_path / "cut.lzy"
    short.write_bytes({"half": data[: len(data) // 2], "preamble only": data[:64], "empty": b""}[cut])
    for call in (ls.open, ls.load):
        with pytest.raises(ls.FormatError) as info:
            call(short)
        assert str(short) in str(info.value)


def test_what_open_returns_is_a_view_base_for_every_kind(tmp_path):
    # ls.open is annotated with the common base: a folder's ShardedView is no CheckpointView.
    arrays = {"a": np.arange(4, dtype=np.float32), "b": np.ones((2, 2), np.int8)}
    ls.save(arrays, tmp_path / "one.lzy")
    ls.save(arrays, tmp_path / "one.safetensors")
    ls.save(arrays, tmp_path / "shards", max_shard_size=8)
    kinds = {}
    for name in ("one.lzy", "one.safetensors", "shards"):
        with ls.open(tmp_path / name) as ck:
            assert isinstance(ck, ls.ViewBase), name
            assert ck["a"].tolist() == [0, 1, 2, 3]
            kinds[name] = type(ck).__name__
    assert kinds["shards"] == "ShardedView" and kinds["one.lzy"] == "CheckpointView"
    assert typing.get_type_hints(ls.open)["return"] is ls.ViewBase
