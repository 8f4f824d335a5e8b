"""The view contract (lazystore.views.base.ViewBase), checked on every kind of view.

One suite, run against each way a checkpoint can be opened: lazystore files
(raw, zstd), safetensors files (written by the safetensors library, and by
lazystore's SafetensorsWriter, which records checksums), sharded folders
(lazystore's, and Hugging Face's safetensors shards), npz and torch zip
archives, a lazystore file served over HTTP, and a ``select()`` of each.
Every value is compared with the arrays that were saved.
"""

from __future__ import annotations

import fnmatch
import gc
import json
import re
import struct
from collections.abc import Callable, KeysView, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp

import lazystore as ls
from lazystore._core.frameworks import FRAMEWORK_KEY
from lazystore.interop.archives import open_archive
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.testing.rangeserver import RangeServer
from lazystore.testing.strategies import same_bits
from lazystore.views import ShardedView, TensorSlice, ViewBase


def make_tensors() -> dict[str, np.ndarray]:
    """Dtypes every format stores, a 0-d and an empty tensor; not in name order."""
    rng = np.random.default_rng(7)
    return {
        "layers.1.weight": np.round(rng.standard_normal((50, 24)), 1).astype(np.float32),
        "embed.weight": np.round(rng.standard_normal((64, 20)), 2).astype(np.float16),
        "layers.0.weight": rng.integers(-5, 5, size=(40, 9)).astype(np.int32),
        "step": np.array(1234, dtype=np.int64),
        "layers.0.bias": np.linspace(-1, 1, 9, dtype=np.float64),
        "mask": rng.random((9, 5)) > 0.5,
        "empty": np.zeros((0, 4), dtype=np.float32),
        "ids": (np.arange(300) % 251).astype(np.uint8),
    }


TENSORS = make_tensors()
METADATA = {"epoch": 3, "note": "contract"}
CHUNK_BYTES = 1024  # several chunks per big tensor, so that slices read parts
# What the selection variants select: out of file order, and leaving
# "layers.0.bias" and "ids" out.
SELECTED = ["step", "layers.0.weight", "empty", "embed.weight", "layers.1.weight", "mask"]
LEFT_OUT = "ids"
NAME = "layers.1.weight"  # in every variant
# Basic indexes; numpy says which are out of range for each tensor.
INDEXES = [(), Ellipsis, slice(None), slice(1, 5), slice(-3, None), slice(None, None, 2),
           slice(None, None, -3), slice(5, 2), 0, -1, 7, (1, slice(2, 7, 3)), (Ellipsis, 1),
           (None, slice(None, 2)), (slice(3, 30), Ellipsis, slice(None, None, -2)), (-2, 4),
           (slice(None), None, 0)]


# -- writing each kind ------------------------------------------------------------------


def write_lazystore(compression):
    def write(folder: Path, server) -> str:
        path = folder / "ck.lzy"
        ls.save(TENSORS, path, compression=compression, metadata=METADATA, chunk_bytes=CHUNK_BYTES)
        return str(path)

    return write


def write_safetensors_library(folder: Path, server) -> str:
    path = folder / "ck.safetensors"
    stnp.save_file(TENSORS, str(path), metadata={"note": "contract"})
    return str(path)


def write_safetensors_lazystore(folder: Path, server) -> str:
    path = folder / "ck.safetensors"
    with SafetensorsWriter(path, metadata=METADATA) as w:
        for name, arr in TENSORS.items():
            w.add(name, arr)
    return str(path)


def write_sharded_lazystore(folder: Path, server) -> str:
    path = folder / "sharded"
    ls.save(TENSORS, path, max_shard_size=3000, compression="zstd", metadata=METADATA, chunk_bytes=CHUNK_BYTES)
    return str(path)


def write_sharded_hf(folder: Path, server) -> str:
    path = folder / "hf"
    path.mkdir()
    names = list(TENSORS)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, group in shards.items():
        stnp.save_file({n: TENSORS[n] for n in group}, str(path / file))
    owner = {n: file for file, group in shards.items() for n in group}
    index = {"metadata": {"total_size": sum(a.nbytes for a in TENSORS.values())},
             "weight_map": {n: owner[n] for n in names}}  # the view's order is the index's
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    return str(path)


def write_npz(folder: Path, server) -> str:
    path = folder / "arrays.npz"
    with open(path, "wb") as f:
        np.savez(f, **TENSORS)
    return str(path)


def write_torch(folder: Path, server) -> str:
    torch = pytest.importorskip("torch")
    path = folder / "model.pt"
    torch.save({n: torch.from_numpy(a.copy()) for n, a in TENSORS.items()}, path)
    return str(path)


def write_remote(folder: Path, server) -> str:
    local = write_lazystore("zstd")(folder, server)
    key = f"{folder.name}.lzy"
    server.files[key] = Path(local).read_bytes()
    return server.url(key)


def safetensors_file_order(target: str) -> list[str]:
    """A safetensors file's tensors in data order (the order of the view), read
    from its header here rather than by lazystore."""
    with open(target, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: tuple(header[k]["data_offsets"]))  # stable: ties keep header order


@dataclass(frozen=True)
class Kind:
    id: str
    write: Callable
    format: str
    metadata: dict
    checksums: bool
    compression: str | None = None  # of the tensors that it shrinks (the others are stored raw)
    open: Callable = ls.open
    order: Callable | None = None  # the view's order, from the target; else TENSORS' order
    system_keys: tuple = ()  # of system_metadata

    @property
    def remote(self) -> bool:
        return self.id == "remote"


KINDS = [
    Kind("lazystore-raw", write_lazystore(None), "lazystore", METADATA, True),
    Kind("lazystore-zstd", write_lazystore("zstd"), "lazystore", METADATA, True, "zstd"),
    Kind("safetensors", write_safetensors_library, "safetensors", {"note": "contract"}, False,
         order=safetensors_file_order),
    Kind("safetensors-lazystore", write_safetensors_lazystore, "safetensors", METADATA, True),
    Kind("sharded-lazystore", write_sharded_lazystore, "lazystore (sharded)", METADATA, True, "zstd"),
    Kind("sharded-hf", write_sharded_hf, "safetensors (sharded)",
         {"total_size": sum(a.nbytes for a in TENSORS.values())}, False),
    Kind("npz", write_npz, "npz", {}, False, open=open_archive),
    # torch tensors come back as torch tensors: a flat dict of them is marked
    # so (issue #25; nested state would record it in its structure).
    Kind("torch", write_torch, "torch", {}, False, open=open_archive, system_keys=(FRAMEWORK_KEY,)),
    Kind("remote", write_remote, "lazystore", METADATA, True, "zstd"),
]


# -- the cases ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server():
    with RangeServer() as s:
        yield s


class Case:
    """One kind, whole or selected: ``view`` is what the tests exercise,
    ``owner`` the view that opened the storage (``view`` itself, or its
    parent), ``expected`` the arrays ``view`` must hold, in its order."""

    def __init__(self, kind: Kind, selected: bool, target: str, server):
        self.kind, self.selected, self.target, self.server = kind, selected, target, server
        self.file_order = kind.order(target) if kind.order else list(TENSORS)
        names = SELECTED if selected else self.file_order
        self.expected = {n: TENSORS[n] for n in names}
        self.owners: list[ViewBase] = []
        self.owner, self.view = self.open()

    def open(self) -> tuple[ViewBase, ViewBase]:
        owner = self.kind.open(self.target)
        self.owners.append(owner)
        return owner, owner.select(SELECTED) if self.selected else owner

    @property
    def names(self) -> list[str]:
        return list(self.expected)

    def damage(self, name: str) -> None:
        """Flip the first stored byte of ``name`` where it is stored."""
        with ls.open(self.target) as ck:
            holder = next(s for s in ck.shards if name in s) if isinstance(ck, ShardedView) else ck
            where, offset = holder.name, holder.info(name).offset
        if self.kind.remote:
            key = where.rsplit("/", 1)[1]
            data = bytearray(self.server.files[key])
            data[offset] ^= 0xFF
            self.server.files[key] = bytes(data)
        else:
            data = bytearray(Path(where).read_bytes())
            data[offset] ^= 0xFF
            Path(where).write_bytes(bytes(data))

    def close(self) -> None:
        for v in self.owners:
            v.close()


@pytest.fixture(params=[pytest.param((k, sel), marks=[pytest.mark.slow] if k.remote else [])  # a server each
                        for k in KINDS for sel in (False, True)],
                ids=[f"{k.id}{'-select' if sel else ''}" for k in KINDS for sel in (False, True)])
def case(request, tmp_path, server):
    kind, selected = request.param
    c = Case(kind, selected, kind.write(tmp_path, server), server)
    yield c
    c.close()


def ops(v: ViewBase, handle: TensorSlice) -> dict[str, Callable]:
    """Every method of the contract, called on ``v`` (``handle`` is one of its slices)."""
    return {
        "getitem": lambda: v[NAME],
        "get": lambda: v.get(NAME),
        "info": lambda: v.info(NAME),
        "get_slice": lambda: v.get_slice(NAME),
        "slice handle": lambda: handle[1:3],
        "select glob": lambda: v.select("layers.*"),
        "select list": lambda: v.select([NAME]),
        "load": lambda: v.load(),
        "load some": lambda: v.load([NAME]),
        "verify": lambda: v.verify(),
        "verify some": lambda: v.verify([NAME]),
        "iter": lambda: list(v),
        "keys": lambda: list(v.keys()),
        "items": lambda: list(v.items()),
        "len": lambda: len(v),
        "contains": lambda: NAME in v,
        "metadata": lambda: v.metadata,
        "system_metadata": lambda: v.system_metadata,
        "nbytes": lambda: v.nbytes,
        "stored_nbytes": lambda: v.stored_nbytes,
    }


def assert_all_closed(v: ViewBase, handle: TensorSlice) -> None:
    assert v.closed
    for what, call in ops(v, handle).items():
        with pytest.raises(ls.ClosedError):
            call()
            pytest.fail(f"{what} worked on a closed view")


def assert_reads_right(v: ViewBase, names) -> None:
    for n in names:
        assert same_bits(v[n], TENSORS[n]), n
    assert same_bits(v.get_slice(NAME)[2:5, ::3], TENSORS[NAME][2:5, ::3])


# -- names ------------------------------------------------------------------------------------


def test_is_a_view(case):
    v = case.view
    assert isinstance(v, ViewBase) and isinstance(v, Mapping)
    assert v.format == case.kind.format
    assert isinstance(v.format_version, tuple)
    assert isinstance(v.name, str) and v.name
    assert not v.closed


@pytest.mark.slow
def test_names_in_order(case):
    v = case.view
    assert list(v) == case.names
    assert len(v) == len(case.names)
    assert isinstance(v.keys(), KeysView) and list(v.keys()) == case.names
    assert [k for k, _ in v.items()] == case.names
    keys = v.keys()
    for n in case.names:
        assert n in v and n in keys
    for absent in ("missing", "layers", "layers.*", "", 3, None, ("a",)):
        assert absent not in v
    assert [] not in v  # unhashable: simply not a name
    assert (LEFT_OUT in v) is (not case.selected)


@pytest.mark.slow
def test_values_are_bit_exact(case):
    v = case.view
    for n in case.names:
        assert same_bits(v[n], TENSORS[n]), n
    for (n, got), want in zip(v.items(), case.expected.values()):
        assert same_bits(got, want), n
    assert same_bits(v.get("step"), TENSORS["step"])
    assert v.get("missing") is None and v.get("missing", 5) == 5


def test_missing_names(case):
    v = case.view
    absent = ["missing", "", "LAYERS.1.WEIGHT", "layers.*", 0, None] + ([LEFT_OUT] if case.selected else [])
    calls = (lambda n: v[n], v.info, v.get_slice, lambda n: v.load([n]), lambda n: v.select([n]),
             lambda n: v.select([NAME, n]))
    for name in absent:
        for call in calls:
            with pytest.raises(ls.TensorNotFoundError) as err:
                call(name)
            assert isinstance(err.value, KeyError)
    with pytest.raises(ls.InvalidInputError):
        v.select(3)


# -- info and slices --------------------------------------------------------------------------


def test_info(case):
    v = case.view
    for n, arr in case.expected.items():
        info = v.info(n)
        assert isinstance(info, ls.TensorInfo)
        assert (info.name, info.dtype, info.shape, info.ndim, info.size) == \
            (n, arr.dtype, arr.shape, arr.ndim, arr.size)
        assert info.nbytes == arr.nbytes
        assert info.compression in {None, case.kind.compression}
        if info.compression is None:
            assert info.stored_nbytes == info.nbytes
        else:
            assert 0 < info.stored_nbytes < info.nbytes
        assert info.chunk_count >= (1 if arr.nbytes else 0)
        assert isinstance(info.offset, int) and info.offset >= 0
        assert v.info(n) == info
    assert v.info(NAME).compression == case.kind.compression  # it shrinks
    assert v.nbytes == sum(a.nbytes for a in case.expected.values())
    assert v.stored_nbytes == sum(v.info(n).stored_nbytes for n in v)
    if case.kind.compression is None:
        assert v.stored_nbytes == v.nbytes


def test_get_slice_handle(case):
    v = case.view
    for n, arr in case.expected.items():
        sl = v.get_slice(n)
        assert isinstance(sl, TensorSlice)
        assert sl.shape == arr.shape and sl.dtype == arr.dtype and sl.ndim == arr.ndim
        assert sl.get_shape() == list(arr.shape) and all(type(d) is int for d in sl.get_shape())
        if arr.ndim:
            assert len(sl) == arr.shape[0]
        else:
            with pytest.raises(TypeError):
                len(sl)


@pytest.mark.slow
def test_get_slice_values(case):
    v = case.view
    checked = 0
    for n, arr in case.expected.items():
        sl = v.get_slice(n)
        for index in INDEXES:
            try:
                want = arr[index]
            except IndexError:
                with pytest.raises(IndexError):
                    sl[index]
                continue
            assert same_bits(sl[index], want), (n, index)
            checked += 1
    assert checked > 60


@pytest.mark.parametrize("index", [[0, 1], np.array([0, 2]), (slice(None), [1]), np.ones(50, dtype=bool), True,
                                   1.5, "a", (Ellipsis, 0, Ellipsis)], ids=repr)
def test_get_slice_takes_basic_indexing_only(case, index):
    with pytest.raises(ls.InvalidSelectionError):
        case.view.get_slice(NAME)[index]


# -- select -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pattern", ["layers.*", "*.weight", "*", "?????", "nothing*", "layers.[01].*"])
def test_select_glob(case, pattern):
    want = [n for n in case.names if fnmatch.fnmatchcase(n, pattern)]
    if not want:  # a glob that matches nothing is an unknown name, in every kind of view
        for call in (case.view.select, case.view.load):
            with pytest.raises(ls.TensorNotFoundError, match=re.escape(f"no tensor matches the glob '{pattern}'")):
                call(pattern)
        return
    sub = case.view.select(pattern)
    assert list(sub) == want and len(sub) == len(want)
    assert isinstance(sub, type(case.view))
    for n in want:
        assert same_bits(sub[n], TENSORS[n])
    assert list(case.view) == case.names  # the view itself is unchanged


def test_select_list(case):
    v = case.view
    names = [NAME, "step", "empty"]
    sub = v.select(names)
    assert list(sub) == names and sub.metadata == v.metadata and sub.format == v.format
    for n in names:
        assert same_bits(sub[n], TENSORS[n]) and sub.info(n) == v.info(n)
    assert same_bits(sub.get_slice(NAME)[3:9, 1], TENSORS[NAME][3:9, 1])
    assert list(sub.load()) == names
    assert "embed.weight" not in sub
    with pytest.raises(ls.TensorNotFoundError):
        sub["embed.weight"]
    assert list(v.select(n for n in ("mask", "step"))) == ["mask", "step"]
    assert list(v.select([])) == [] and len(v.select(())) == 0


def test_closing_a_selection_leaves_its_parent_open(case):
    v = case.view
    sub = v.select([NAME, "step"])
    handle = sub.get_slice(NAME)
    sub.close()
    sub.close()
    assert_all_closed(sub, handle)
    assert not v.closed
    assert_reads_right(v, case.names)


def test_closing_a_view_closes_its_selections(case):
    v = case.view
    sub = v.select("*")
    subsub = sub.select([NAME])
    handles = (sub.get_slice(NAME), subsub.get_slice(NAME))
    sub.close()  # the middle one: its own selection closes with it
    assert_all_closed(subsub, handles[1])
    assert_reads_right(v, case.names)
    other = v.select([NAME])
    handle = other.get_slice(NAME)
    v.close()
    assert_all_closed(other, handle)


def test_closing_the_owner_closes_a_selection(case):
    v = case.view
    handle = v.get_slice(NAME)
    case.owner.close()
    assert_all_closed(v, handle)


# -- load ---------------------------------------------------------------------------------------


def test_load_all(case):
    v = case.view
    out = v.load()
    assert list(out) == case.names
    for n, arr in out.items():
        assert isinstance(arr, np.ndarray) and same_bits(arr, TENSORS[n]), n
        assert arr.flags.writeable, n
    out[NAME][...] = 0  # the arrays are the caller's: writing them changes nothing stored
    assert same_bits(v[NAME], TENSORS[NAME])
    assert same_bits(v.load([NAME])[NAME], TENSORS[NAME])
    assert all(same_bits(a, TENSORS[n]) for n, a in v.load(verify=case.kind.checksums).items())


def test_load_some(case):
    v = case.view
    names = ["step", NAME, "mask"]
    out = v.load(names)
    assert list(out) == names
    assert all(same_bits(out[n], TENSORS[n]) and out[n].flags.writeable for n in names)
    out = v.load("layers.*")
    assert list(out) == [n for n in case.names if n.startswith("layers.")]
    assert all(same_bits(a, TENSORS[n]) for n, a in out.items())
    assert v.load([]) == {}


# -- verify -------------------------------------------------------------------------------------


def test_verify(case):
    v = case.view
    if case.kind.checksums:
        assert v.verify() == []
        assert v.verify([NAME, "step"]) == []
        assert v.verify("layers.*") == []
        with pytest.raises(ls.TensorNotFoundError):
            v.verify(["missing"])
    else:
        for call in (v.verify, lambda: v.verify([NAME])):
            with pytest.raises(ls.VerificationUnavailableError):
                call()


@pytest.mark.slow
def test_verify_names_the_damaged_tensors(case):
    if not case.kind.checksums:
        pytest.skip("nothing records what the bytes should be")
    case.close()
    damaged = {NAME, LEFT_OUT}
    for n in damaged:
        case.damage(n)
    _, v = case.open()
    assert v.verify() == [n for n in case.names if n in damaged]
    assert v.verify(["step", NAME]) == [NAME]
    assert v.verify(["step"]) == []
    assert same_bits(v["step"], TENSORS["step"])


# -- metadata and closing ----------------------------------------------------------------------


def test_metadata(case):
    v = case.view
    assert v.metadata == case.kind.metadata
    assert tuple(v.system_metadata) == case.kind.system_keys
    assert v.select([NAME]).metadata == case.kind.metadata


@pytest.mark.slow
def test_after_close_every_method_raises_closed_error(case):
    v = case.view
    kept = {n: v[n] for n in case.names}
    parts = {n: v.get_slice(n)[...] for n in case.names}
    loaded = v.load()
    handle = v.get_slice(NAME)
    v.close()
    assert_all_closed(v, handle)
    v.close()  # closing twice is fine
    assert v.closed
    gc.collect()
    for n in case.names:  # arrays handed out stay valid
        assert same_bits(kept[n], TENSORS[n]) and same_bits(parts[n], TENSORS[n])
        assert same_bits(loaded[n], TENSORS[n])
    if case.selected:
        assert not case.owner.closed
        assert_reads_right(case.owner, SELECTED)


def test_context_manager(case):
    with case.view as v:
        assert v is case.view
        handle = v.get_slice(NAME)
        assert same_bits(v[NAME], TENSORS[NAME])
    assert_all_closed(v, handle)
    assert repr(v)  # a closed view still describes itself
