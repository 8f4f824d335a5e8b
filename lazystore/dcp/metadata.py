"""DCP's ``Metadata`` as JSON, both ways, with no pickle.

:mod:`torch.distributed.checkpoint` pickles its ``Metadata`` into a
``.metadata`` file. lazystore stores it as a JSON document instead (the
reserved metadata member :data:`DCP_KEY` of the checkpoint's ``metadata.lzy``)
and decodes it strictly: every field is type-checked and anything unexpected
raises :class:`~lazystore.FormatError`, so a hostile file can neither run code
nor hand DCP a malformed plan.

The document (``"format": "lazystore-dcp"``, ``"version": 1``)::

    {"dcp_version": "1.0.0" | null, "save_id": str,
     "state_dict": {fqn: {"type": "bytes"}
                       | {"type": "tensor", "dtype": "bfloat16", "size": [..],
                          "requires_grad": bool, "layout": "strided",
                          "memory_format": "contiguous", "pin_memory": bool,
                          "chunks": [{"offsets": [..], "sizes": [..]}, ..]}},
     "storage": [{"fqn": str, "offset": [..] | null, "index": int | null,
                  "file": "rank-00000.lzy", "key": str}, ..],
     "planner_data": {"kind": "none"} | {"kind": "paths", "value": {fqn: [str | int, ..]}}
                     | {"kind": "json", "value": ...},
     "storage_meta": null | {"checkpoint_id": str | null, "save_id": str | null,
                             "modules": [str, ..]}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from lazystore._core.dtypes import BY_TORCH_NAME
from lazystore._core.torch_arrays import torch_name
from lazystore._native.entry_rules import size_problem
from lazystore.errors import FormatError, InvalidInputError

DCP_KEY = "__lazystore_dcp__"
DOC_FORMAT = "lazystore-dcp"
DOC_VERSION = 1

_LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}
_MEMORY_FORMATS = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last,
                   "preserve": torch.preserve_format}


@dataclass(frozen=True)
class LazyStorageInfo:
    """Where one saved item lives: the storage_data of a lazystore DCP checkpoint.

    Attributes
    ----------
    relative_path : str
        The lazystore file holding the item, relative to the checkpoint folder.
    key : str
        The item's tensor name in that file.
    """

    relative_path: str
    key: str


def item_key(index: MetadataIndex) -> str:
    """The stable tensor name of one saved item: ``fqn`` for a bytes item,
    ``fqn[o1,o2,..]`` (the chunk's offsets) for a tensor chunk."""
    if index.offset is None:
        return index.fqn
    return f"{index.fqn}[{','.join(str(int(o)) for o in index.offset)}]"


def _name_of(value, table: dict, what: str) -> str:
    for name, v in table.items():
        if v == value:
            return name
    raise InvalidInputError(f"cannot record {what} {value} in a lazystore DCP checkpoint")


def encode(metadata: Metadata, save_id: str) -> dict:
    """The JSON document of ``metadata`` (raises InvalidInputError if some part has no safe form)."""
    state: dict[str, dict] = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            state[fqn] = {"type": "bytes"}
            continue
        if not isinstance(md, TensorStorageMetadata):
            raise InvalidInputError(f"unknown DCP storage metadata {type(md).__name__} for {fqn!r}")
        p = md.properties
        dtype = torch_name(p.dtype)
        if dtype not in BY_TORCH_NAME:
            raise InvalidInputError(f"torch dtype {p.dtype} of {fqn!r} cannot be stored by lazystore")
        state[fqn] = {
            "type": "tensor", "dtype": dtype, "size": [int(s) for s in md.size],
            "requires_grad": bool(p.requires_grad), "layout": _name_of(p.layout, _LAYOUTS, "layout"),
            "memory_format": _name_of(p.memory_format, _MEMORY_FORMATS, "memory format"),
            "pin_memory": bool(p.pin_memory),
            "chunks": [{"offsets": [int(o) for o in c.offsets], "sizes": [int(s) for s in c.sizes]}
                       for c in md.chunks],
        }
    storage = []
    for index, info in (metadata.storage_data or {}).items():
        if not isinstance(info, LazyStorageInfo):
            raise InvalidInputError(f"storage data of {index} is not lazystore's: {info!r}")
        storage.append({"fqn": index.fqn, "offset": None if index.offset is None else [int(o) for o in index.offset],
                        "index": index.index, "file": info.relative_path, "key": info.key})
    sm = metadata.storage_meta
    return {
        "format": DOC_FORMAT, "version": DOC_VERSION, "dcp_version": metadata.version, "save_id": save_id,
        "state_dict": state, "storage": storage, "planner_data": _encode_planner_data(metadata.planner_data),
        "storage_meta": None if sm is None else {
            "checkpoint_id": None if sm.checkpoint_id is None else str(sm.checkpoint_id),
            "save_id": sm.save_id, "modules": [str(m) for m in sm.modules]},
    }


def _encode_planner_data(data) -> dict:
    if data is None:
        return {"kind": "none"}
    # DefaultSavePlanner's: flattened key -> path of str keys and int indices (a tuple)
    if isinstance(data, dict) and all(
        isinstance(k, str) and isinstance(v, tuple)
        and all(isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in v)
        for k, v in data.items()
    ):
        return {"kind": "paths", "value": {k: list(v) for k, v in data.items()}}
    try:
        same = json.loads(json.dumps(data, allow_nan=False)) == data
    except (TypeError, ValueError):
        same = False
    if not same:
        raise InvalidInputError(
            "the planner's planner_data has no JSON form (lazystore never pickles); "
            f"got {type(data).__name__}")
    return {"kind": "json", "value": data}


# -- decoding -------------------------------------------------------------------


def _bad(what: str):
    return FormatError(f"corrupt DCP metadata: {what}")


def _obj(x, what: str, keys: set[str]) -> dict:
    if not isinstance(x, dict):
        raise _bad(f"{what} is not an object")
    if set(x) != keys:
        raise _bad(f"{what} has keys {sorted(x)}, expected {sorted(keys)}")
    return x


def _int(x, what: str, *, minimum: int = 0) -> int:
    if not isinstance(x, int) or isinstance(x, bool) or x < minimum:
        raise _bad(f"{what} is not an integer >= {minimum}")
    return x


def _str(x, what: str) -> str:
    if not isinstance(x, str):
        raise _bad(f"{what} is not a string")
    return x


def _opt_str(x, what: str):
    return None if x is None else _str(x, what)


def _bool(x, what: str) -> bool:
    if not isinstance(x, bool):
        raise _bad(f"{what} is not a boolean")
    return x


def _ints(x, what: str, *, minimum: int = 0) -> list[int]:
    if not isinstance(x, list):
        raise _bad(f"{what} is not a list")
    return [_int(v, what, minimum=minimum) for v in x]


def _choice(x, table: dict, what: str):
    if not isinstance(x, str) or x not in table:
        raise _bad(f"{what} {x!r} is not one of {sorted(table)}")
    return table[x]


def decode(doc) -> tuple[Metadata, str]:
    """``Metadata`` and the save id from the JSON document; FormatError on anything odd."""
    doc = _obj(doc, "document", {"format", "version", "dcp_version", "save_id", "state_dict", "storage",
                                  "planner_data", "storage_meta"})
    if doc["format"] != DOC_FORMAT:
        raise _bad(f"format {doc['format']!r} is not {DOC_FORMAT!r}")
    if doc["version"] != DOC_VERSION or isinstance(doc["version"], bool):
        raise _bad(f"unsupported version {doc['version']!r} (this lazystore reads version {DOC_VERSION})")
    save_id = _str(doc["save_id"], "save_id")
    if not isinstance(doc["state_dict"], dict):
        raise _bad("state_dict is not an object")
    state: dict = {}
    for fqn, md in doc["state_dict"].items():
        where = f"state_dict[{fqn!r}]"
        if isinstance(md, dict) and md.get("type") == "bytes":
            _obj(md, where, {"type"})
            state[fqn] = BytesStorageMetadata()
            continue
        md = _obj(md, where, {"type", "dtype", "size", "requires_grad", "layout", "memory_format",
                              "pin_memory", "chunks"})
        if md["type"] != "tensor":
            raise _bad(f"{where} has type {md['type']!r}")
        size = _ints(md["size"], f"{where}.size")
        dtype_name = _choice(md["dtype"], {n: n for n in BY_TORCH_NAME}, f"{where}.dtype")
        # DCP allocates tensors of this size (torch.empty, when it builds the
        # state dict from the metadata): bounded as a lazystore file's are.
        problem = size_problem(tuple(size), BY_TORCH_NAME[dtype_name].dtype.itemsize)
        if problem is not None:
            raise _bad(f"{where}.size {size}: {problem}")
        dtype = getattr(torch, dtype_name)
        props = TensorProperties(
            dtype=dtype, layout=_choice(md["layout"], _LAYOUTS, f"{where}.layout"),
            requires_grad=_bool(md["requires_grad"], f"{where}.requires_grad"),
            memory_format=_choice(md["memory_format"], _MEMORY_FORMATS, f"{where}.memory_format"),
            pin_memory=_bool(md["pin_memory"], f"{where}.pin_memory"))
        if not isinstance(md["chunks"], list):
            raise _bad(f"{where}.chunks is not a list")
        chunks = []
        for c in md["chunks"]:
            c = _obj(c, f"{where} chunk", {"offsets", "sizes"})
            offsets, sizes = _ints(c["offsets"], f"{where} chunk offsets"), _ints(c["sizes"], f"{where} chunk sizes")
            if len(offsets) != len(size) or len(sizes) != len(size) or any(
                    o + s > n for o, s, n in zip(offsets, sizes, size)):
                raise _bad(f"{where} has a chunk {offsets}+{sizes} outside its size {size}")
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes)))
        state[fqn] = TensorStorageMetadata(properties=props, size=torch.Size(size), chunks=chunks)

    if not isinstance(doc["storage"], list):
        raise _bad("storage is not a list")
    storage = {}
    for s in doc["storage"]:
        s = _obj(s, "storage entry", {"fqn", "offset", "index", "file", "key"})
        fqn = _str(s["fqn"], "storage fqn")
        offset = None if s["offset"] is None else _ints(s["offset"], "storage offset")
        index = None if s["index"] is None else _int(s["index"], "storage index")
        rel = _str(s["file"], "storage file")
        if not rel or "/" in rel or "\\" in rel or rel in (".", "..") or "\0" in rel:
            raise _bad(f"storage file {rel!r} is not a plain file name")
        md = state.get(fqn)
        if md is None or isinstance(md, BytesStorageMetadata) != (offset is None):
            raise _bad(f"storage entry {fqn!r} does not match the state_dict")
        mi = MetadataIndex(fqn, offset, index)
        if mi in storage:
            raise _bad(f"duplicate storage entry {item_key(mi)!r}")
        storage[mi] = LazyStorageInfo(rel, _str(s["key"], "storage key"))

    sm = doc["storage_meta"]
    if sm is not None:
        sm = _obj(sm, "storage_meta", {"checkpoint_id", "save_id", "modules"})
        if not isinstance(sm["modules"], list):
            raise _bad("storage_meta.modules is not a list")
        sm = StorageMeta(checkpoint_id=_opt_str(sm["checkpoint_id"], "checkpoint_id"),
                         save_id=_opt_str(sm["save_id"], "save_id"),
                         modules=[_str(m, "module") for m in sm["modules"]])
    metadata = Metadata(state_dict_metadata=state, planner_data=_decode_planner_data(doc["planner_data"]),
                        storage_data=storage, storage_meta=sm,
                        version=_opt_str(doc["dcp_version"], "dcp_version"))
    return metadata, save_id


def _decode_planner_data(pd):
    if not isinstance(pd, dict) or pd.get("kind") not in ("none", "paths", "json"):
        raise _bad("planner_data is not a tagged object")
    if pd["kind"] == "none":
        _obj(pd, "planner_data", {"kind"})
        return None
    pd = _obj(pd, "planner_data", {"kind", "value"})
    if pd["kind"] == "json":
        return pd["value"]
    if not isinstance(pd["value"], dict):
        raise _bad("planner_data paths are not an object")
    out = {}
    for k, path in pd["value"].items():
        if not isinstance(path, list) or not all(
                isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in path):
            raise _bad(f"planner_data path of {k!r} is not a list of str and int")
        out[k] = tuple(path)
    return out
