"""Nested state: save(obj) -> load() gives back the same structure, types and bits."""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import textwrap
import warnings
from collections import OrderedDict, defaultdict, namedtuple

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore._core.distribution import DISTRIBUTION
from lazystore.testing.strategies import DTYPE_LIST, random_array, reaches_mmap, same_bits, same_tree
from lazystore.views import tree
from tests.hypothesis_profiles import examples
from tests.paths import FORMAT_SPEC


def roundtrip(obj, tmp_path, **kw):
    path = tmp_path / "state.lzy"
    ls.save(obj, path, **kw)
    return ls.load(path)


def stored_tree(path):
    with ls.open(path) as ck:
        return ck.system_metadata.get(tree.TREE_KEY)


# ---------------------------------------------------------------------------
# scalar leaves
# ---------------------------------------------------------------------------

INTS = [0, 1, -1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**64) - 1, 10**100, -(10**300)]
FLOATS = [0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, math.inf, -math.inf, math.nan, 5e-324, -5e-324,
          2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
          struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0],  # -nan
          struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000001))[0]]  # NaN with a payload
STRS = ["", "x", "a/b", "ünïcødé ✓", "line\nbreak", '"quoted"', "~1", "\U0001f600"]


@pytest.mark.parametrize("value", INTS, ids=repr)
def test_int(tmp_path, value):
    out = roundtrip({"v": value, "in_list": [value], "in_tuple": (value,)}, tmp_path)
    assert type(out["v"]) is int and out["v"] == value
    assert out["in_list"] == [value] and out["in_tuple"] == (value,)


@pytest.mark.parametrize("value", FLOATS, ids=lambda f: struct.pack(">d", f).hex())
def test_float_bits(tmp_path, value):
    out = roundtrip({"v": value}, tmp_path)["v"]
    assert type(out) is float
    assert struct.pack("<d", out) == struct.pack("<d", value)


@pytest.mark.parametrize("value", STRS, ids=repr)
def test_str(tmp_path, value):
    out = roundtrip({"v": value}, tmp_path)["v"]
    assert type(out) is str and out == value


def test_bool_none_and_the_types_of_one(tmp_path):
    obj = [1, True, 1.0, False, 0, 0.0, None, "1"]
    out = roundtrip(obj, tmp_path)
    same_tree(obj, out)
    assert [type(x) for x in out] == [int, bool, float, bool, int, float, type(None), str]


def test_numpy_scalars_are_0d_arrays(tmp_path):
    """As in a flat checkpoint, a numpy scalar is stored and loaded as a 0-d array."""
    obj = {"i": np.int64(1), "f": np.float32(1.5), "b": np.bool_(True), "in_list": [np.float64(-0.0)]}
    out = roundtrip(obj, tmp_path)
    same_tree({"i": np.array(1), "f": np.array(1.5, np.float32), "b": np.array(True),
               "in_list": [np.array(-0.0)]}, out)
    assert out["f"].flags.writeable


def test_scalar_at_the_top_level(tmp_path):
    for value in (7, -0.0, None, "s", True, 2**70):
        same_tree(value, roundtrip(value, tmp_path))


def test_floats_are_hex_text_in_the_tree(tmp_path):
    ls.save({"a": 0.1, "b": math.inf, "c": -0.0, "d": math.nan}, tmp_path / "f.lzy")
    items = dict((k, node) for k, node in stored_tree(tmp_path / "f.lzy")["root"]["v"])
    assert items["a"] == {"t": "float", "v": (0.1).hex()}
    assert items["b"] == {"t": "float", "v": "inf"}
    assert items["c"] == {"t": "float", "v": "-0x0.0p+0"}
    assert items["d"] == {"t": "float", "v": "nan:7ff8000000000000"}


# ---------------------------------------------------------------------------
# containers
# ---------------------------------------------------------------------------


def test_containers_keep_their_types_and_order(tmp_path):
    obj = {
        "tuple": (1, (2, 3), [4, (5,)]),
        "list": [(), [], {}, [[]]],
        "int_keys": {3: "c", -1: "a", 0: "z", 2**64: "big"},
        "mixed_keys": {0: "int", "0": "str"},
        "empty": {},
        "order": {"z": 1, "a": 2, "m": 3},
        "odict": OrderedDict([("b", 1), ("a", 2)]),
    }
    out = roundtrip(obj, tmp_path)
    same_tree(obj, out)
    assert list(out["int_keys"]) == [3, -1, 0, 2**64]
    assert out["mixed_keys"][0] == "int" and out["mixed_keys"]["0"] == "str"


@pytest.mark.parametrize("obj", [{}, [], (), {"a": {}}, [[], ()], ((),), {"o": OrderedDict()}], ids=repr)
def test_empty_containers(tmp_path, obj):
    same_tree(obj, roundtrip(obj, tmp_path))


def test_empty_flat_dict_has_no_tree(tmp_path):
    ls.save({}, tmp_path / "e.lzy")
    assert stored_tree(tmp_path / "e.lzy") is None
    assert ls.load(tmp_path / "e.lzy") == {}


def test_any_flat_mapping_of_arrays_is_stored_without_a_tree(tmp_path):
    """A flat str -> numpy mapping is the file itself, whatever its Mapping type:
    it loads back as a plain dict (no per-tensor structure in the index)."""
    for flat in (OrderedDict(), OrderedDict([("b", np.ones(1)), ("a", np.zeros(1))])):
        ls.save(flat, tmp_path / "o.lzy")
        assert stored_tree(tmp_path / "o.lzy") is None
        out = ls.load(tmp_path / "o.lzy")
        assert type(out) is dict and list(out) == list(flat)
    with ls.open(tmp_path / "o.lzy") as ck:
        ls.save(ck, tmp_path / "copy.lzy")
    assert stored_tree(tmp_path / "copy.lzy") is None


def test_ordereddict_metadata_is_kept(tmp_path):
    sd = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2)).state_dict()
    assert isinstance(sd, OrderedDict) and sd._metadata
    out = roundtrip({"model": sd}, tmp_path)["model"]
    same_tree(sd, out)
    assert out._metadata == sd._metadata
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    model.load_state_dict(out)


def test_deep_nesting_up_to_the_limit(tmp_path):
    obj = leaf = {}
    for _ in range(tree.MAX_DEPTH - 1):
        leaf["n"] = {}
        leaf = leaf["n"]
    leaf["x"] = np.arange(3)
    out = roundtrip(obj, tmp_path)
    with ls.open(tmp_path / "state.lzy") as ck:
        assert list(ck) == ["/".join(["n"] * (tree.MAX_DEPTH - 1) + ["x"])]
    same_tree(obj, out)


def test_too_deep_or_cyclic_state_is_refused(tmp_path):
    cyclic = []
    cyclic.append(cyclic)
    deep = leaf = []
    for _ in range(tree.MAX_DEPTH + 1):
        leaf.append([])
        leaf = leaf[0]
    for obj in (cyclic, deep):
        with pytest.raises(ls.InvalidInputError, match="deeper than"):
            ls.save(obj, tmp_path / "x.lzy")
    assert list(tmp_path.iterdir()) == []


def test_shared_objects_are_saved_as_copies(tmp_path):
    arr = np.arange(4)
    sub = {"k": 1}
    out = roundtrip({"a": arr, "b": arr, "c": sub, "d": sub}, tmp_path)
    assert same_bits(out["a"], arr) and same_bits(out["b"], arr)
    assert out["c"] == out["d"] == sub
    out["a"][0] = 99
    assert out["b"][0] == 0


# ---------------------------------------------------------------------------
# tensor keys
# ---------------------------------------------------------------------------


def test_tensor_keys_are_joined_paths(tmp_path):
    obj = {"model": {"w": np.zeros(2)}, "opt": {"state": {0: {"exp_avg": np.ones(2)}}},
           "layers": [np.zeros(1), (np.ones(1),)], "step": 3}
    ls.save(obj, tmp_path / "k.lzy")
    with ls.open(tmp_path / "k.lzy") as ck:
        assert list(ck) == ["model/w", "opt/state/0/exp_avg", "layers/0", "layers/1/0"]
        assert same_bits(ck["opt/state/0/exp_avg"], np.ones(2))


def test_top_level_tensor(tmp_path):
    arr = np.arange(5.0)
    out = roundtrip(arr, tmp_path)
    assert same_bits(out, arr)
    with ls.open(tmp_path / "state.lzy") as ck:
        assert list(ck) == [""]
    t = torch.arange(3)
    assert torch.equal(roundtrip(t, tmp_path), t)


def test_flat_dict_with_slashes_stays_flat_without_a_tree(tmp_path):
    flat = {"a/b": np.zeros(2), "a/c/d": np.ones(3, np.float32), "": np.ones(1, np.int8)}
    ls.save(flat, tmp_path / "f.lzy")
    assert stored_tree(tmp_path / "f.lzy") is None
    with ls.open(tmp_path / "f.lzy") as ck:
        assert ck.system_metadata == {}
    out = ls.load(tmp_path / "f.lzy")
    same_tree(flat, out)


def test_flat_dict_of_torch_tensors_with_slashes_stays_flat(tmp_path):
    flat = {"a/b": torch.zeros(2), "a/c": torch.ones(2)}
    out = roundtrip(flat, tmp_path)
    same_tree(flat, out)


def test_collision_flat_key_vs_nested_path(tmp_path):
    x, y = np.array([1]), np.array([2])
    obj = {"a/b": x, "a": {"b": y}}
    ls.save(obj, tmp_path / "c.lzy")
    with ls.open(tmp_path / "c.lzy") as ck:
        assert list(ck) == ["a/b", "a/b~1"]
        assert ck["a/b"][0] == 1 and ck["a/b~1"][0] == 2
    same_tree(obj, ls.load(tmp_path / "c.lzy"))


def test_collision_never_steals_another_leafs_own_path(tmp_path):
    obj = {"a/b": np.array([1]), "a": {"b": np.array([2])}, "a/b~1": np.array([3]),
           0: np.array([4]), "0": np.array([5])}
    ls.save(obj, tmp_path / "c.lzy")
    with ls.open(tmp_path / "c.lzy") as ck:
        assert {k: int(ck[k][0]) for k in ck} == {"a/b": 1, "a/b~2": 2, "a/b~1": 3, "0": 4, "0~1": 5}
    same_tree(obj, ls.load(tmp_path / "c.lzy"))


def test_keys_are_deterministic(tmp_path):
    obj = {"a/b": np.array([1]), "a": {"b": np.array([2]), "c": [np.array([3])]}}
    ls.save(obj, tmp_path / "1.lzy")
    ls.save(obj, tmp_path / "2.lzy")
    assert (tmp_path / "1.lzy").read_bytes() == (tmp_path / "2.lzy").read_bytes()


# ---------------------------------------------------------------------------
# numpy leaves
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPE_LIST, ids=lambda d: d.name)
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_numpy_leaves_every_dtype(tmp_path, dtype, compression):
    obj = {"nested": [random_array(dtype, (4, 3), 1), random_array(dtype, (), 2), random_array(dtype, (0, 2), 3)],
           "step": 1}
    out = roundtrip(obj, tmp_path, compression=compression)
    same_tree(obj, out)
    for arr in out["nested"]:
        assert arr.flags.writeable


def test_numpy_non_contiguous_and_big_endian(tmp_path):
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    obj = {"t": base.T, "step": base[::2, 1::3], "be": np.arange(5, dtype=">i4")}
    out = roundtrip(obj, tmp_path)
    assert np.array_equal(out["t"], base.T) and np.array_equal(out["step"], base[::2, 1::3])
    assert np.array_equal(out["be"], np.arange(5)) and out["be"].dtype == np.dtype("<i4")


def test_user_metadata_beside_the_tree(tmp_path):
    ls.save({"a": [1, 2]}, tmp_path / "m.lzy", metadata={"note": "hi"})
    with ls.open(tmp_path / "m.lzy") as ck:
        assert ck.metadata == {"note": "hi"}
        assert set(ck.system_metadata) == {tree.TREE_KEY}


@st.composite
def _states(draw):
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5))
    arrays = st.builds(lambda dt, seed, shape: random_array(dt, shape, seed),
                       st.sampled_from(DTYPE_LIST), st.integers(0, 2**16), st.sampled_from([(), (0,), (3,), (2, 2)]))
    keys = st.one_of(st.text(alphabet="ab/~0", max_size=3), st.integers(-2, 2))
    leaves = st.one_of(scalars, arrays)
    return draw(st.recursive(
        leaves,
        lambda kids: st.one_of(st.lists(kids, max_size=3), st.lists(kids, max_size=3).map(tuple),
                               st.dictionaries(keys, kids, max_size=3)),
        max_leaves=12))


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(obj=_states())
def test_random_nested_states_roundtrip(tmp_path_factory, obj):
    path = tmp_path_factory.mktemp("h") / "s.lzy"
    ls.save(obj, path)
    same_tree(obj, ls.load(path))


# ---------------------------------------------------------------------------
# torch leaves
# ---------------------------------------------------------------------------

TORCH_DTYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16,
                torch.uint32, torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64,
                torch.complex128, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]
NUMPY_OF = {torch.bfloat16: ml_dtypes.bfloat16, torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
            torch.float8_e5m2: ml_dtypes.float8_e5m2}


def _torch_random(dtype, shape, seed):
    if dtype in NUMPY_OF:  # no numpy twin in torch: build the bits, reinterpret them
        arr = random_array(NUMPY_OF[dtype], shape, seed)
        return torch.from_numpy(arr.view({1: np.uint8, 2: np.int16}[arr.itemsize])).view(dtype)
    return torch.from_numpy(random_array(torch.empty(0, dtype=dtype).numpy().dtype, shape, seed))


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_leaves_every_dtype(tmp_path, dtype):
    obj = {"t": _torch_random(dtype, (5, 3), 1), "zero_d": _torch_random(dtype, (), 2),
           "empty": _torch_random(dtype, (0, 4), 3)}
    out = roundtrip(obj, tmp_path)
    same_tree(obj, out)
    with ls.open(tmp_path / "state.lzy") as ck:  # the file holds the plain numpy dtype
        assert ck["t"].dtype == np.dtype(NUMPY_OF.get(dtype) or obj["t"].numpy().dtype)


@pytest.mark.slow
def test_bfloat16_bits_survive(tmp_path):
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)  # every bf16 pattern, NaNs too
    t = bits.view(torch.bfloat16)
    out = roundtrip({"t": t}, tmp_path)["t"]
    assert out.dtype == torch.bfloat16 and torch.equal(out.view(torch.int16), bits)
    f8 = torch.arange(256, dtype=torch.int16).to(torch.uint8)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        back = roundtrip({"t": f8.view(dtype)}, tmp_path)["t"]
        assert back.dtype == dtype and torch.equal(back.view(torch.uint8), f8)


def test_non_contiguous_torch_tensors(tmp_path):
    base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
    views = {"t": base.transpose(0, 2), "step": base[:, ::2, 1::2], "expand": torch.ones(3, 1).expand(3, 4),
             "offset": base.reshape(-1)[7:19], "bf16_t": base.to(torch.bfloat16).mT,
             "conj": torch.tensor([1 + 2j, 3 - 4j]).conj(), "neg": torch.tensor([1 + 2j]).conj().imag}
    out = roundtrip(views, tmp_path)
    for k, v in views.items():
        assert out[k].is_contiguous() and out[k].dtype == v.dtype
        assert torch.equal(out[k], v.resolve_conj().resolve_neg()), k


def test_requires_grad_and_parameters(tmp_path):
    w = torch.nn.Parameter(torch.randn(3))
    frozen = torch.nn.Parameter(torch.randn(2), requires_grad=False)
    g = torch.randn(2, requires_grad=True)
    y = g * 2  # a non-leaf with grad history
    out = roundtrip({"w": w, "frozen": frozen, "g": g, "y": y, "plain": torch.zeros(1)}, tmp_path)
    assert type(out["w"]) is torch.nn.Parameter and out["w"].requires_grad
    assert type(out["frozen"]) is torch.nn.Parameter and not out["frozen"].requires_grad
    assert type(out["g"]) is torch.Tensor and out["g"].requires_grad and out["g"].is_leaf
    assert out["y"].requires_grad and out["y"].is_leaf and torch.equal(out["y"], y.detach())
    assert not out["plain"].requires_grad
    same_tree({"w": w, "g": g}, {"w": out["w"], "g": out["g"]})


def test_numpy_and_torch_leaves_come_back_as_themselves(tmp_path):
    obj = {"np": np.arange(3, dtype=np.float32), "torch": torch.arange(3, dtype=torch.float32),
           "np_0d": np.array(2.5), "torch_0d": torch.tensor(2.5, dtype=torch.float64)}
    out = roundtrip(obj, tmp_path)
    assert type(out["np"]) is np.ndarray and type(out["torch"]) is torch.Tensor
    assert type(out["np_0d"]) is np.ndarray and type(out["torch_0d"]) is torch.Tensor
    same_tree(obj, out)


def test_map_location(tmp_path):
    path = tmp_path / "d.lzy"
    ls.save({"t": torch.ones(2), "n": np.ones(2)}, path)
    for where in (None, "cpu", torch.device("cpu")):
        out = ls.load(path, map_location=where)
        assert out["t"].device == torch.device("cpu") and isinstance(out["n"], np.ndarray)
    for bad in ("nonsense", 1.5, {"cuda:0": "cpu"}):
        with pytest.raises(ls.InvalidInputError):
            ls.load(path, map_location=bad)
    if torch.cuda.is_available():  # pragma: no cover - CPU-only machines
        assert ls.load(path, map_location="cuda:0")["t"].device.type == "cuda"


def test_meta_device_tensor_refused(tmp_path):
    with pytest.raises(ls.InvalidInputError, match="meta"):
        ls.save({"t": torch.empty(3, device="meta")}, tmp_path / "m.lzy")
    assert list(tmp_path.iterdir()) == []


def test_loaded_tensors_are_writable_private_and_warning_free(tmp_path):
    path = tmp_path / "w.lzy"
    obj = {"t": torch.arange(6, dtype=torch.float32), "bf": torch.ones(4, dtype=torch.bfloat16),
           "n": np.arange(6.0)}
    ls.save(obj, path)
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = ls.load(path)
        out["t"] += 1
        out["t"].mul_(2)
        out["bf"][0] = 5
        out["n"][:] = -1
    assert reaches_mmap(out["n"])  # a private copy-on-write view of the file, not a copy
    assert path.read_bytes() == before
    same_tree(obj, ls.load(path))


def test_torch_leaf_shares_memory_with_the_loaded_array(tmp_path, monkeypatch):
    """No copy is made on the way from the file's array to the torch tensor."""
    path = tmp_path / "s.lzy"
    ls.save({"t": torch.arange(4, dtype=torch.float32), "b": torch.zeros(2, dtype=torch.bfloat16)}, path)
    seen = {}
    real = ls.CheckpointView.load

    def spy(self, keys=None, **kw):
        seen.update(real(self, keys, **kw))
        return seen

    monkeypatch.setattr(ls.CheckpointView, "load", spy)
    out = ls.load(path)
    assert reaches_mmap(seen["t"]) and reaches_mmap(seen["b"])
    assert out["t"].data_ptr() == seen["t"].ctypes.data
    assert out["b"].data_ptr() == seen["b"].ctypes.data


# ---------------------------------------------------------------------------
# keys=
# ---------------------------------------------------------------------------


def _train_state():
    return {"model": {"w": np.arange(3.0), "b": np.zeros(1)},
            "optimizer": {"state": {0: {"exp_avg": np.ones(3), "step": 4}, 1: {"exp_avg": np.ones(1)}},
                          "param_groups": [{"lr": 0.1, "params": [0, 1]}]},
            "layers": [np.array([0]), np.array([1]), np.array([2])],
            "pair": (np.array([5]), 6),
            "epoch": 3}


def test_keys_glob_gives_a_subtree(tmp_path):
    path = tmp_path / "k.lzy"
    ls.save(_train_state(), path)
    out = ls.load(path, keys="optimizer/state/*")
    same_tree({"optimizer": {"state": {0: {"exp_avg": np.ones(3)}, 1: {"exp_avg": np.ones(1)}}}}, out)
    same_tree({"model": {"w": np.arange(3.0), "b": np.zeros(1)}}, ls.load(path, keys="model/*"))


def test_keys_list_and_pruned_sequences(tmp_path):
    path = tmp_path / "k.lzy"
    ls.save(_train_state(), path)
    out = ls.load(path, keys=["layers/2", "layers/0", "pair/0"])
    same_tree({"layers": [np.array([0]), np.array([2])], "pair": (np.array([5]),)}, out)


def test_keys_matching_nothing_and_unknown_names(tmp_path):
    path = tmp_path / "k.lzy"
    ls.save(_train_state(), path)
    with pytest.raises(ls.TensorNotFoundError):  # a glob matching nothing is an unknown name (#24)
        ls.load(path, keys="nothing*")
    assert ls.load(path, keys=[]) == {}
    with pytest.raises(ls.TensorNotFoundError):
        ls.load(path, keys=["model/nope"])
    with pytest.raises(ls.TensorNotFoundError):
        ls.load(path, keys=["epoch"])  # a scalar, not a tensor
    ls.save([np.zeros(1), 3], tmp_path / "l.lzy")
    with pytest.raises(ls.TensorNotFoundError):
        ls.load(tmp_path / "l.lzy", keys="x")
    assert ls.load(tmp_path / "l.lzy", keys=[]) == []


def test_keys_on_flat_files_unchanged(tmp_path):
    path = tmp_path / "flat.lzy"
    ls.save({"a": np.zeros(1), "b": np.ones(1)}, path)
    assert list(ls.load(path, ["b"])) == ["b"]
    assert list(ls.load(path, keys="*")) == ["a", "b"]


# ---------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------

Point = namedtuple("Point", "x y")
BAD_VALUES = {
    "set": {1, 2},
    "bytes": b"abc",
    "complex": 1 + 2j,
    "object": object(),
    "namedtuple": Point(1, 2),
    "defaultdict": defaultdict(list),
    "torch.Size": torch.Size([2, 3]),
    "torch.dtype": torch.float32,
    "enum": __import__("enum").Enum("E", "A").A,
    "object_array": np.array([object()], dtype=object),
    "datetime_scalar": np.datetime64("2020-01-01"),
    "sparse": torch.eye(2).to_sparse(),
    "bits8": torch.empty(2, dtype=torch.bits8),  # raw bits, no numeric dtype (float8 fnuz is stored since 1.1)
}


@pytest.mark.parametrize("value", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
def test_unsupported_values_refused_before_writing(tmp_path, value):
    with pytest.raises(ls.InvalidInputError) as exc:
        ls.save({"ok": np.zeros(10), "nested": [1, {"bad": value}]}, tmp_path / "x.lzy")
    assert "nested/1/bad" in str(exc.value)
    assert list(tmp_path.iterdir()) == []


def test_quantized_tensors_refused(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated in torch
        q = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
    with pytest.raises(ls.UnsupportedDtypeError, match="qint8"):
        ls.save({"q": q}, tmp_path / "q.lzy")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("key", [True, 1.5, None, b"k", ("t",)], ids=repr)
def test_bad_dict_keys(tmp_path, key):
    with pytest.raises(ls.InvalidInputError, match="keys must be str or int"):
        ls.save({"a": {key: 1}}, tmp_path / "x.lzy")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("obj", [{"a\0b": [np.zeros(1)]}, {"a": [np.zeros(1)], "b": {"x\0": np.zeros(1)}},
                                 ["\ud800"], {"\udc80": [1]}], ids=repr)
def test_unencodable_text(tmp_path, obj):
    with pytest.raises(ls.InvalidInputError):
        ls.save(obj, tmp_path / "x.lzy")
    assert list(tmp_path.iterdir()) == []


def test_errors_are_typed():
    assert issubclass(ls.MissingDependencyError, ImportError)
    assert issubclass(ls.CheckpointNotFoundError, KeyError)


# ---------------------------------------------------------------------------
# hostile trees: a malformed __lazystore_tree__ is a FormatError, never a crash
# ---------------------------------------------------------------------------


def _write_raw(path, tensors, structure):
    with ls.Writer(path) as w:
        w.system_metadata[tree.TREE_KEY] = structure
        for name, arr in tensors.items():
            w.add(name, arr)


def _node(t, **kw):
    return {"t": t, **kw}


HOSTILE = {
    "not_object": ([], {}),
    "no_version": ({"root": _node("none")}, {}),
    "bool_version": ({"version": True, "root": _node("none")}, {}),
    "no_root": ({"version": 1}, {}),
    "unknown_type": ({"version": 1, "root": _node("pickle", v="x")}, {}),
    "node_not_object": ({"version": 1, "root": [1]}, {}),
    "int_as_float": ({"version": 1, "root": _node("int", v=1.5)}, {}),
    "int_as_bool": ({"version": 1, "root": _node("int", v=True)}, {}),
    "bool_as_int": ({"version": 1, "root": _node("bool", v=1)}, {}),
    "bad_float": ({"version": 1, "root": _node("float", v="1e5x")}, {}),
    "decimal_float": ({"version": 1, "root": _node("float", v="0.1")}, {}),
    "float_overflow": ({"version": 1, "root": _node("float", v="0x1p99999")}, {}),
    "float_number": ({"version": 1, "root": _node("float", v=1.0)}, {}),
    "bare_nan": ({"version": 1, "root": _node("float", v="nan")}, {}),
    "nan_bits_not_nan": ({"version": 1, "root": _node("float", v="nan:3ff0000000000000")}, {}),
    "str_not_str": ({"version": 1, "root": _node("str", v=3)}, {}),
    "list_not_list": ({"version": 1, "root": _node("list", v={})}, {}),
    "dict_bad_pair": ({"version": 1, "root": _node("dict", v=[["a"]])}, {}),
    "dict_bool_key": ({"version": 1, "root": _node("dict", v=[[True, _node("none")]])}, {}),
    "dict_dup_key": ({"version": 1, "root": _node("dict", v=[["a", _node("none")], ["a", _node("none")]])}, {}),
    "metadata_on_dict": ({"version": 1, "root": _node("dict", v=[], _metadata=_node("none"))}, {}),
    "tensor_in_metadata": ({"version": 1, "root": _node("odict", v=[], _metadata=_node("numpy", key="a"))},
                           {"a": np.zeros(1)}),
    "missing_tensor": ({"version": 1, "root": _node("numpy", key="zz")}, {"a": np.zeros(1)}),
    "tensor_twice": ({"version": 1, "root": _node("list", v=[_node("numpy", key="a"), _node("numpy", key="a")])},
                     {"a": np.zeros(1)}),
    "tensor_not_in_tree": ({"version": 1, "root": _node("numpy", key="a")}, {"a": np.zeros(1), "b": np.zeros(1)}),
    "key_not_str": ({"version": 1, "root": _node("numpy", key=1)}, {"1": np.zeros(1)}),
    "grad_flag_not_bool": ({"version": 1, "root": _node("torch", key="a", requires_grad=1)}, {"a": np.zeros(1)}),
    "int_requires_grad": ({"version": 1, "root": _node("torch", key="a", requires_grad=True)},
                          {"a": np.zeros(2, np.int64)}),
}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_tree(tmp_path, case):
    structure, tensors = HOSTILE[case]
    path = tmp_path / "h.lzy"
    _write_raw(path, tensors, structure)
    with pytest.raises(ls.FormatError):
        ls.load(path)
    with ls.open(path) as ck:  # a reader that ignores the tree still reads every tensor
        for name, arr in tensors.items():
            assert same_bits(ck[name], arr)


def test_hostile_deep_tree(tmp_path):
    node = _node("none")
    for _ in range(tree.MAX_DEPTH + 1):
        node = _node("list", v=[node])
    _write_raw(tmp_path / "d.lzy", {}, {"version": 1, "root": node})
    with pytest.raises(ls.FormatError, match="deeper"):
        ls.load(tmp_path / "d.lzy")


def test_newer_tree_version(tmp_path):
    _write_raw(tmp_path / "v.lzy", {"a": np.zeros(1)}, {"version": 2, "root": {"t": "future", "key": "a"}})
    with pytest.raises(ls.UnsupportedVersionError, match="newer lazystore"):
        ls.load(tmp_path / "v.lzy")
    assert same_bits(ls.open(tmp_path / "v.lzy")["a"], np.zeros(1))


def test_unknown_node_members_are_ignored(tmp_path):
    structure = {"version": 1, "future": 1,
                 "root": _node("dict", v=[["a", _node("numpy", key="a", stats={"max": 0})]], hint="x")}
    _write_raw(tmp_path / "u.lzy", {"a": np.zeros(2)}, structure)
    same_tree({"a": np.zeros(2)}, ls.load(tmp_path / "u.lzy"))


# ---------------------------------------------------------------------------
# without torch
# ---------------------------------------------------------------------------


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_numpy_only_use_never_imports_torch(tmp_path):
    proc = _run("""
        import sys, math, numpy as np, lazystore as ls
        state = {"w": np.ones(3), "opt": {0: (1, None, math.inf)}, "s": np.float32(2), "flat": {"a": np.ones(1)}}
        ls.save(state, "n.lzy", compression="zstd")
        out = ls.load("n.lzy"); ls.load("n.lzy", keys="w")
        assert out["opt"][0][2] == math.inf and out["w"].sum() == 3
        ls.save({"flat": np.zeros(2)}, "f.lzy"); ls.load("f.lzy")
        with ls.open("n.lzy") as ck: list(ck)
        mgr = ls.CheckpointManager("ck", keep_last=1, metric="m", keep_best=1)
        mgr.save(1, state, metrics={"m": np.float32(1)}); mgr.restore(); mgr.best()
        assert "torch" not in sys.modules, "torch was imported"
        print("ok")
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
def test_without_torch_installed(tmp_path):
    ls.save({"model": {"w": torch.ones(2, dtype=torch.bfloat16)}, "step": 3}, tmp_path / "t.lzy")
    proc = _run("""
        import sys
        sys.modules["torch"] = None  # as if PyTorch were not installed: "import torch" fails
        import numpy as np, lazystore as ls
        # numpy-only use works
        ls.save({"a": [np.arange(3), {"b": 1.5}]}, "n.lzy")
        assert ls.load("n.lzy")["a"][1] == {"b": 1.5}
        # the tensors of a torch checkpoint are readable as numpy arrays
        with ls.open("t.lzy") as ck:
            assert ck["model/w"].dtype.name == "bfloat16" and list(ck) == ["model/w"]
        try:
            ls.load("t.lzy")
        except ls.MissingDependencyError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        else:
            raise SystemExit("no error")
    """, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"pip install '{DISTRIBUTION}[torch]'" in proc.stdout and "pip install torch" in proc.stdout


def test_python_values_are_structure_not_array_likes(tmp_path):
    """Lists and Python scalars are nested state: they come back as themselves,
    not as arrays. Wrap them in np.asarray to store a tensor."""
    obj = {"w": np.zeros(2), "list": [[1, 2], [3, 4]], "python_scalar": 3.0}
    out = roundtrip(obj, tmp_path)
    same_tree(obj, out)
    with ls.open(tmp_path / "state.lzy") as ck:
        assert list(ck) == ["w"]


def test_format_spec_example_is_what_lazystore_writes(tmp_path):
    """docs/format.md section 11.7: the example state gives the tensors and the tree shown."""
    doc = FORMAT_SPEC.read_text()
    section = doc[doc.index("### 11.7"):doc.index("### 11.8")]
    example = section[section.index("**Example.**"):]
    code = example.split("```python\n")[1].split("```")[0]
    shown = json.loads(example.split("```json\n")[1].split("```")[0])
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(code, {"ls": ls, "np": np, "torch": torch, "math": math})
    finally:
        os.chdir(cwd)
    with ls.open(tmp_path / "ck.lzy") as ck:
        assert list(ck) == ["model/w", "a/b", "a/b~1"]
        assert [ck.info(n).dtype.name for n in ck] == ["bfloat16", "float64", "float64"]
        assert ck.system_metadata == shown
