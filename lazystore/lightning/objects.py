"""Paths and namespaces in a Lightning checkpoint, saved as plain values.

Lightning projects keep ``pathlib`` paths and ``argparse.Namespace``
objects in their hyper-parameters (``save_hyperparameters()`` of an
``__init__`` that takes them). lazystore's tree stores a fixed set of types
(docs/format.md, section 11.7), and a new node type would be refused by
every reader before it, so the plugin writes these objects as plain values
(a path as its string, a namespace as the dict of its attributes) and
records where they were in one entry of the checkpoint dict, RECORD_KEY::

    {"version": 1, "objects": [[[key, ...], "Path"], [[key, ...], "Namespace"], ...]}

Each object is a key path from the top of the checkpoint (dict keys, list
or tuple indexes) and the type to rebuild. Objects inside others come
first, so a namespace's paths are rebuilt while it is still a dict. Any
reader (``ls.load``, an older lazystore) sees a valid checkpoint of plain
values and the record; the plugin's load rebuilds the objects. Types are
rebuilt from a fixed table of names: nothing in a file names a callable.
"""

from __future__ import annotations

import numbers
from argparse import Namespace
from collections import OrderedDict
from pathlib import Path, PosixPath, PurePosixPath, PureWindowsPath, WindowsPath

from lazystore.errors import FormatError, InvalidInputError, UnsupportedVersionError

RECORD_KEY = "__lazystore_lightning__"
RECORD_VERSION = 1
# Deeper state is left alone here; ls.save refuses it (likely a cycle) with its own message.
MAX_DEPTH = 100

# Exact types only: a subclass would come back as its base, so it is left
# for ls.save to refuse. A concrete path is rebuilt as this platform's Path.
_PATH_NAMES: dict[type, str] = {PosixPath: "Path", WindowsPath: "Path", PurePosixPath: "PurePosixPath",
               PureWindowsPath: "PureWindowsPath"}
_PATH_TYPES = {"Path": Path, "PurePosixPath": PurePosixPath, "PureWindowsPath": PureWindowsPath}
NAMESPACE = "Namespace"


# -- saving ------------------------------------------------------------------------


def encode(checkpoint):
    """The checkpoint to save: ``checkpoint`` itself when it holds no path or
    namespace, else a copy (of the containers on the way to them only) with
    plain values and the record. The caller's objects are never changed."""
    if not isinstance(checkpoint, dict):
        return checkpoint
    if RECORD_KEY in checkpoint:
        raise InvalidInputError(f"{RECORD_KEY!r} is reserved: LazyStoreCheckpointIO records there which values "
                                "were paths and namespaces; name that entry of the checkpoint otherwise")
    found: list[tuple[tuple, str]] = []
    plain = _plain(checkpoint, (), found, 0)
    if not found:
        return checkpoint
    return {**plain, RECORD_KEY: {"version": RECORD_VERSION, "objects": [[list(at), kind] for at, kind in found]}}


def _plain(x, at: tuple, found: list, depth: int):
    """``x`` with its paths and namespaces made plain (``x`` itself if it has none)."""
    t = type(x)
    if depth >= MAX_DEPTH:
        return x
    if t is dict or t is OrderedDict:
        out = None
        for k, v in x.items():
            new = _plain(v, at + (_key(k),), found, depth + 1)
            if new is not v:
                if out is None:
                    out = t(x)
                out[k] = new
        if out is None:
            return x
        if hasattr(x, "_metadata"):  # a state_dict()'s module versions, which ls.save keeps
            # dict's stubs know no _metadata: torch sets it on the OrderedDict a state_dict() returns
            out._metadata = x._metadata  # type: ignore[attr-defined]
        return out
    if t is list or t is tuple:
        items = [_plain(v, at + (i,), found, depth + 1) for i, v in enumerate(x)]
        return x if all(a is b for a, b in zip(items, x)) else t(items)
    if t is Namespace:
        attributes = _plain(vars(x), at, found, depth + 1)
        found.append((at, NAMESPACE))  # after its contents: they are rebuilt first
        return dict(attributes)  # a copy, never the namespace's own __dict__
    name = _PATH_NAMES.get(t)
    if name is not None:
        found.append((at, name))
        return str(x)
    return x


def _key(k):
    """A dict key as the tree stores it (numpy integers become ints); others
    are left for ls.save to refuse."""
    if isinstance(k, numbers.Integral) and not isinstance(k, bool):
        return int(k)
    return k


# -- loading -----------------------------------------------------------------------


def decode(checkpoint, name: str):
    """The checkpoint with its paths and namespaces rebuilt and the record
    removed; a malformed record is a FormatError naming the file ``name``."""
    if not isinstance(checkpoint, dict) or RECORD_KEY not in checkpoint:
        return checkpoint
    for at, kind in _objects(checkpoint.pop(RECORD_KEY), name):
        checkpoint = _rebuild(checkpoint, at, kind, name, at)
    return checkpoint


def _objects(record, name: str) -> list[tuple[list, str]]:
    if not isinstance(record, dict) or type(record.get("version")) is not int:
        raise FormatError(f"{name}: corrupt {RECORD_KEY} (LazyStoreCheckpointIO's record): not a versioned object")
    if record["version"] != RECORD_VERSION:
        raise UnsupportedVersionError(
            f"{name}: {RECORD_KEY} is version {record['version']}; this lazystore reads version {RECORD_VERSION}: "
            "a newer lazystore wrote it (ls.load still reads the checkpoint, with plain values)")
    objects = record.get("objects")
    if not isinstance(objects, list):
        raise FormatError(f"{name}: corrupt {RECORD_KEY}: no list of objects")
    out = []
    for item in objects:
        if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], list) or not item[0]
                or any(type(k) not in (str, int) for k in item[0])
                or (item[1] != NAMESPACE and item[1] not in _PATH_TYPES)):
            raise FormatError(f"{name}: corrupt {RECORD_KEY}: {_short(item)} is not [[key, ...], type], "
                              f"type one of {sorted([*_PATH_TYPES, NAMESPACE])}")
        out.append((item[0], item[1]))
    return out


def _rebuild(container, at: list, kind: str, name: str, where: list):
    """``container`` with the value at key path ``at`` rebuilt as ``kind``
    (a tuple on the way is rebuilt, the others are changed in place)."""
    if not at:
        return _make(container, kind, name, where)
    key, t = at[0], type(container)
    if t in (dict, OrderedDict) and key in container:
        child = container[key]
    elif t in (list, tuple) and type(key) is int and 0 <= key < len(container):
        child = container[key]
    else:
        raise FormatError(f"{name}: corrupt {RECORD_KEY}: nothing at {where}")
    new = _rebuild(child, at[1:], kind, name, where)
    if t is tuple:
        return container[:key] + (new,) + container[key + 1:]
    container[key] = new
    return container


def _make(value, kind: str, name: str, where: list):
    if kind == NAMESPACE:
        if type(value) is dict and all(type(k) is str for k in value):
            return Namespace(**value)
    elif type(value) is str:
        return _PATH_TYPES[kind](value)
    raise FormatError(f"{name}: corrupt {RECORD_KEY}: the {kind} at {where} is a {type(value).__name__}")


def _short(x) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."
