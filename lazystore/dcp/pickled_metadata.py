"""torch's DCP ``.metadata`` (a pickle), read without running anything it says.

``FileSystemWriter`` pickles its ``Metadata`` with :func:`pickle.dump`, and
``FileSystemReader`` reads it back with a plain :func:`pickle.load`, which runs
whatever code a tampered file names. torch's safer unpickler (the one behind
``torch.load(weights_only=True)``) cannot read it either: it knows only the
opcodes of pickle protocol 2, what ``torch.save`` writes, while
``pickle.dump`` writes protocol 4 or 5 (``STACK_GLOBAL``, ``MEMOIZE``,
``FRAME``). So lazystore reads it with an unpickler of its own:

- every global must be one of the few names DCP's metadata uses (its
  dataclasses, ``torch.Size``, torch dtypes, ``torch.serialization._get_layout``,
  ``pathlib`` paths); any other, ``os.system`` say, is a FormatError before
  anything is built;
- none of those names resolves to the real object: each resolves to a stand-in
  made fresh for this one read, which only records what it is given (so a
  pickle can neither call torch's constructors nor change a class that
  outlives the read);
- what the stand-ins recorded is then checked field by field, and only plain
  values (names, ints, dtype names) come out: :class:`TorchMetadata`.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass

from lazystore._core.dtypes import BY_TORCH_NAME
from lazystore.errors import FormatError

_DCP = "torch.distributed.checkpoint.metadata"
# (module, name) -> the kind of stand-in it resolves to.
_GLOBALS: dict[tuple[str, str], str] = {
    (_DCP, "Metadata"): "Metadata",
    (_DCP, "TensorStorageMetadata"): "TensorStorageMetadata",
    (_DCP, "BytesStorageMetadata"): "BytesStorageMetadata",
    (_DCP, "ChunkStorageMetadata"): "ChunkStorageMetadata",
    (_DCP, "TensorProperties"): "TensorProperties",
    (_DCP, "MetadataIndex"): "MetadataIndex",
    (_DCP, "StorageMeta"): "StorageMeta",
    (_DCP, "_MEM_FORMAT_ENCODING"): "memory_format",
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): "_StorageInfo",
    ("torch", "Size"): "Size",
    ("torch.serialization", "_get_layout"): "layout",
    ("collections", "OrderedDict"): "OrderedDict",
    # StorageMeta.checkpoint_id is the path the checkpoint was saved to.
    **{(m, n): "path" for m in ("pathlib", "pathlib._local")
       for n in ("Path", "PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")},
    **{("torch", name): "dtype" for name in BY_TORCH_NAME},
}
# Python's pickle.dump writes at most this much for DCP metadata of
# 100,000 chunks; a bigger file is refused before it is read.
MAX_METADATA_BYTES = 1 << 30


@dataclass(frozen=True)
class TorchTensor:
    dtype: str  # torch's name: "bfloat16"
    shape: tuple[int, ...]
    chunks: tuple[tuple[int, ...], ...]  # each chunk's offsets ...
    chunk_sizes: tuple[tuple[int, ...], ...]  # ... and sizes


@dataclass(frozen=True)
class TorchStorage:
    """Where one saved item lives: ``length`` bytes at ``offset`` of ``file``."""

    file: str
    offset: int
    length: int
    transforms: tuple[str, ...]  # DCP's stream extensions (compression, ...); () when none


@dataclass(frozen=True)
class TorchMetadata:
    tensors: dict[str, TorchTensor]
    byte_items: tuple[str, ...]
    storage: dict[tuple[str, tuple[int, ...] | None], TorchStorage]  # (fqn, chunk offsets or None)


def read(path) -> TorchMetadata:
    """The metadata of the DCP checkpoint whose ``.metadata`` is at ``path``."""
    with open(path, "rb") as f:
        data = f.read(MAX_METADATA_BYTES + 1)
    if len(data) > MAX_METADATA_BYTES:
        raise FormatError(f"{path}: larger than {MAX_METADATA_BYTES} bytes, more than DCP metadata holds")
    return parse(data, path)


def parse(data: bytes, path) -> TorchMetadata:
    """The metadata pickled in ``data``, read from ``path`` (named in errors)."""
    unpickler = _Unpickler(io.BytesIO(data))
    try:
        root = unpickler.load()
    except _Refused as exc:
        raise FormatError(f"{path}: refused: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a damaged pickle makes the unpickler raise
        raise FormatError(f"{path}: not DCP metadata lazystore can read ({type(exc).__name__}: {exc})") from None
    return _Decoder(path, unpickler.kinds).metadata(root)


# -- the unpickler and its stand-ins --------------------------------------------------


class _Refused(Exception):
    pass


def _stand_ins() -> dict[str, type]:
    """Fresh stand-in classes, one per kind, for one read."""

    class Node:
        __slots__ = ("args", "state")
        kind = ""

        def __new__(cls, *args):
            self = object.__new__(cls)
            self.args, self.state = args, None
            return self

        def __init__(self, *args):
            pass

        def __setstate__(self, state):
            self.state = state

    kinds = {kind: type(kind, (Node,), {"__slots__": (), "kind": kind}) for kind in set(_GLOBALS.values())}
    # An OrderedDict is filled item by item (SETITEMS), as a dict is.
    kinds["OrderedDict"] = type("OrderedDict", (dict,), {})
    return kinds


class _Unpickler(pickle.Unpickler):
    def __init__(self, file):
        super().__init__(file)
        self.kinds = _stand_ins()

    def find_class(self, module, name):
        kind = _GLOBALS.get((module, name))
        if kind is None:
            raise _Refused(f"the pickle names {module}.{name}, which is not part of DCP's metadata "
                           "(lazystore never runs code a checkpoint names)")
        cls = self.kinds[kind]
        return cls(name) if kind == "dtype" else cls  # a dtype is a value, not a callable

    def persistent_load(self, pid):
        raise _Refused("the pickle refers to persistent objects, which DCP's metadata never holds")


# -- checking what the stand-ins recorded ------------------------------------------------


class _Decoder:
    def __init__(self, path, kinds: dict[str, type]):
        self.path = path
        self.kinds = kinds

    def bad(self, what: str) -> FormatError:
        return FormatError(f"{self.path}: corrupt DCP metadata: {what}")

    def node(self, x, kind: str, what: str):
        if type(x) is not self.kinds[kind]:
            raise self.bad(f"{what} is not a {kind}")
        return x

    def fields(self, x, kind: str, what: str, required: set[str]) -> dict:
        state = self.node(x, kind, what).state
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise self.bad(f"{what} has no fields")
        missing = required - set(state)
        if missing:
            raise self.bad(f"{what} lacks {sorted(missing)}")
        return state

    def integer(self, x, what: str) -> int:
        if type(x) is not int or x < 0:
            raise self.bad(f"{what} is not an integer >= 0")
        return x

    def text(self, x, what: str) -> str:
        if type(x) is not str:
            raise self.bad(f"{what} is not a string")
        return x

    def size(self, x, what: str) -> tuple[int, ...]:
        node = self.node(x, "Size", what)
        if len(node.args) != 1 or type(node.args[0]) not in (tuple, list):
            raise self.bad(f"{what} is not a torch.Size")
        return tuple(self.integer(v, what) for v in node.args[0])

    def metadata(self, root) -> TorchMetadata:
        md = self.fields(root, "Metadata", "the root object", {"state_dict_metadata", "storage_data"})
        state, storage = md["state_dict_metadata"], md["storage_data"]
        if not isinstance(state, dict) or not isinstance(storage, dict):
            raise self.bad("state_dict_metadata or storage_data is not a dict")
        tensors: dict[str, TorchTensor] = {}
        byte_items = []
        for fqn, item in state.items():
            fqn = self.text(fqn, "a state_dict_metadata key")
            if type(item) is self.kinds["BytesStorageMetadata"]:
                byte_items.append(fqn)
            else:
                tensors[fqn] = self.tensor(fqn, item)
        return TorchMetadata(tensors, tuple(byte_items), self.storage(storage))

    def tensor(self, fqn: str, item) -> TorchTensor:
        t = self.fields(item, "TensorStorageMetadata", fqn, {"properties", "size", "chunks"})
        dtype = self.properties(fqn, t["properties"])
        shape = self.size(t["size"], f"the size of {fqn!r}")
        if not isinstance(t["chunks"], list):
            raise self.bad(f"the chunks of {fqn!r} are not a list")
        offsets, sizes = [], []
        for c in t["chunks"]:
            c = self.fields(c, "ChunkStorageMetadata", f"a chunk of {fqn!r}", {"offsets", "sizes"})
            offsets.append(self.size(c["offsets"], f"a chunk offset of {fqn!r}"))
            sizes.append(self.size(c["sizes"], f"a chunk size of {fqn!r}"))
        return TorchTensor(dtype, shape, tuple(offsets), tuple(sizes))

    def properties(self, fqn: str, x) -> str:
        state = self.node(x, "TensorProperties", f"the properties of {fqn!r}").state
        if isinstance(state, tuple) and len(state) == 5:  # TensorProperties.__getstate__'s
            dtype, layout = state[0], state[1]
        elif isinstance(state, dict) and {"dtype", "layout"} <= set(state):  # older torch: the fields
            dtype, layout = state["dtype"], state["layout"]
        else:
            raise self.bad(f"the properties of {fqn!r} are malformed")
        name = self.node(dtype, "dtype", f"the dtype of {fqn!r}").args
        layout_args = self.node(layout, "layout", f"the layout of {fqn!r}").args
        if layout_args != ("torch.strided",):
            raise self.bad(f"{fqn!r} has layout {layout_args!r}; only dense (strided) tensors are consolidated")
        return name[0]

    def storage(self, storage: dict) -> dict:
        out = {}
        for index, info in storage.items():
            # MetadataIndex leaves ``offset`` unset (its class default, None) for a bytes item.
            mi = self.fields(index, "MetadataIndex", "a storage_data key", {"fqn"})
            fqn = self.text(mi["fqn"], "a storage fqn")
            offset = mi.get("offset")
            offsets = None if offset is None else self.size(offset, f"the offset of {fqn!r}")
            si = self.fields(info, "_StorageInfo", f"the storage of {fqn!r}", {"relative_path", "offset", "length"})
            rel = self.text(si["relative_path"], f"the file of {fqn!r}")
            if not rel or "/" in rel or "\\" in rel or rel in (".", "..") or "\0" in rel:
                raise self.bad(f"the file of {fqn!r}, {rel!r}, is not a plain file name")
            transforms = si.get("transform_descriptors") or ()
            if not isinstance(transforms, (list, tuple)):
                raise self.bad(f"the transforms of {fqn!r} are not a list")
            out[(fqn, offsets)] = TorchStorage(
                rel, self.integer(si["offset"], f"the offset of {fqn!r}"),
                self.integer(si["length"], f"the length of {fqn!r}"),
                tuple(self.text(t, f"a transform of {fqn!r}") for t in transforms))
        return out
