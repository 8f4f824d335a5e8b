"""Nested training state <-> flat tensors plus a JSON description of the rest.

``flatten(obj)`` walks any nesting of dicts (str or int keys), OrderedDicts,
lists and tuples. Tensor leaves (numpy arrays, torch tensors; numpy scalars
count as 0-d arrays) become named tensors, keyed by their path joined with
"/". Everything else (the containers, and int/float/bool/None/str scalars)
goes into a JSON-able *tree* that records each tensor leaf's exact key. ``build(...)`` turns the
tree and the tensors back into the same structure with the same types.

The tree is stored in the reserved metadata member ``__lazystore_tree__``;
its schema is specified in docs/format.md (section 11.7). A flat mapping of
str names to numpy arrays, or to torch tensors, gets no tree at all: it is
the file itself (:func:`is_flat`, :func:`is_flat_torch`).

Scalars are :mod:`lazystore.views.tree_scalars`'s (re-exported here). This
module never imports torch: torch tensors are recognised, described and
converted by ``lazystore._core.torch_arrays``, which imports torch only when a
torch tensor has to be made.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

import numpy as np

from lazystore._core import frameworks, tensor_names
from lazystore._core import torch_arrays as torch_adapter
from lazystore._core.dtypes import spec_for
from lazystore.errors import FormatError, InvalidInputError, UnsupportedDtypeError, UnsupportedVersionError
from lazystore.views.base import ViewBase
from lazystore.views.tree_scalars import decode_scalar, encode_scalar
from lazystore.views.tree_types import Leaf, Node

__all__ = ["TREE_KEY", "as_array", "build", "decode_scalar", "encode_scalar", "flatten", "has_torch", "is_flat",
           "is_flat_torch", "looked_through", "parse"]

TREE_KEY = "__lazystore_tree__"
TREE_VERSION = 1
SEP = "/"
# A leaf whose joined path is already taken gets "<path>~1", "<path>~2", ...
DISAMBIGUATOR = "~"
# Containers nested deeper than this are refused (on save: likely a cycle; on
# load: a hostile file). Each level costs up to 3 JSON levels, and Python's
# JSON parser stops near 1000.
MAX_DEPTH = 100

# Node types ("t"), see docs/format.md 11.7.
TENSOR_TYPES = ("numpy", "torch")
CONTAINER_TYPES = ("dict", "odict", "list", "tuple")
SCALAR_TYPES = ("none", "bool", "int", "float", "str")

_LEAF_HELP = ("containers: dict (str or int keys), OrderedDict, list, tuple; tensors: numpy arrays "
              "(and numpy scalars, stored as 0-d arrays), torch tensors; scalars: int, float, bool, None, str")


# -- plain flat mappings -----------------------------------------------------------


def is_flat(obj: object) -> bool:
    """Whether ``obj`` is stored as is, without a tree.

    Parameters
    ----------
    obj : object
        What is saved.

    Returns
    -------
    bool
        True for a view, and for a mapping of str names to numpy arrays (or
        numpy scalars, which are stored as 0-d arrays).
    """
    if isinstance(obj, ViewBase):  # flat by construction: don't read its tensors
        return True
    if not isinstance(obj, Mapping):
        return False
    return all(isinstance(k, str) and isinstance(v, (np.ndarray, np.generic)) for k, v in obj.items())


def is_flat_torch(obj: object) -> bool:
    """Whether ``obj`` is a flat torch state dict, stored without a tree.

    Such a mapping is marked as torch (:mod:`lazystore._core.frameworks`),
    so it is the same file whichever way it was saved (``ls.save``,
    ``save_file``, a conversion) and loads as torch tensors. A state_dict's
    ``_metadata`` is not kept, as in safetensors.

    Parameters
    ----------
    obj : object
        What is saved.

    Returns
    -------
    bool
        True for a non-empty mapping of str names to plain torch tensors (a
        ``state_dict()``); a tensor that is a Parameter or requires grad
        makes it nested state: only the tree records those.
    """
    if not isinstance(obj, Mapping) or isinstance(obj, ViewBase) or not obj:
        return False
    return all(isinstance(k, str) and torch_adapter.is_plain(v) for k, v in obj.items())


def looked_through(metadata: Mapping, system_metadata: Mapping) -> tuple[dict, dict]:
    """A checkpoint's ``(metadata, system_metadata)`` as if it were flat.

    ``lazystore convert``, ``merge`` and ``diff`` see checkpoints this way.

    Parameters
    ----------
    metadata : Mapping
        The checkpoint's user metadata.
    system_metadata : Mapping
        lazystore's own metadata entries, the tree among them.

    Returns
    -------
    tuple of (dict, dict)
        Copies of both. When the tree only wraps a flat dict of tensors of
        one kind (older versions saved a ``state_dict()`` so), the tree is
        dropped, and for torch tensors the mark a flat torch file has is
        added; anything else is returned as is.
    """
    kind = _flat_shape(system_metadata.get(TREE_KEY))
    if kind is None:
        return dict(metadata), dict(system_metadata)
    system = {k: v for k, v in system_metadata.items() if k != TREE_KEY}
    if kind == "torch":
        system[frameworks.FRAMEWORK_KEY] = frameworks.TORCH
    return dict(metadata), system


def _flat_shape(structure: object) -> str | None:
    """"torch" or "numpy" when a stored tree is a dict of tensor leaves of
    that one type, each under its own name; None otherwise."""
    root = structure.get("root") if isinstance(structure, dict) else None
    if not isinstance(root, dict) or root.get("t") not in ("dict", "odict") or not root.get("v"):
        return None
    kinds = set()
    for item in root["v"]:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], dict):
            return None
        name, node = item
        if node.get("t") not in TENSOR_TYPES or node.get("key") != name:
            return None
        kinds.add(node["t"])
    return kinds.pop() if len(kinds) == 1 else None


# -- saving ------------------------------------------------------------------------


def flatten(obj: object) -> tuple[Node, dict[str, Leaf]]:
    """A nested state as a JSON-able tree and its tensor leaves.

    Everything is checked here, before a byte is written: container and key
    types, scalar values, tensor dtypes, key texts.

    Parameters
    ----------
    obj : object
        Any nesting of dicts (str or int keys), OrderedDicts, lists and
        tuples, with tensor and scalar leaves.

    Returns
    -------
    tree : dict of str to Any
        The tree, with its version.
    leaves : dict of str to numpy.ndarray or numpy.generic or torch.Tensor
        The tensor leaves by key, in traversal order (depth first,
        containers in their own order).

    Raises
    ------
    InvalidInputError
        A leaf or key of a type that cannot be saved, a container nested
        deeper than ``MAX_DEPTH``, a key or string that is not valid UTF-8,
        or an int too long for JSON.
    UnsupportedDtypeError
        A tensor whose dtype the format cannot store.
    """
    found: list[tuple[str, Leaf, Node]] = []
    root = _encode(obj, (), found, 0)
    # Each leaf gets its joined path, unless an earlier leaf took it (a flat
    # key "a/b" and a nested a -> b; or an int key 0 and a str key "0"): then
    # the first free "<path>~<n>", n = 1, 2, ..., that is no leaf's own path.
    used = {key for key, _, _ in found}
    given: set[str] = set()
    leaves: dict[str, Leaf] = {}
    for key, value, node in found:
        if key in given:
            n = 1
            while f"{key}{DISAMBIGUATOR}{n}" in used:
                n += 1
            key = f"{key}{DISAMBIGUATOR}{n}"
            used.add(key)
        given.add(key)
        node["key"] = key
        leaves[key] = value
    return {"version": TREE_VERSION, "root": root}, leaves


def as_array(leaf: Leaf) -> np.ndarray:
    """The numpy array to write for a leaf returned by :func:`flatten`.

    Parameters
    ----------
    leaf : numpy.ndarray or numpy.generic or torch.Tensor
        The leaf.

    Returns
    -------
    numpy.ndarray
        Its data (a torch tensor's as a numpy array).
    """
    if isinstance(leaf, (np.ndarray, np.generic)):
        return np.asarray(leaf)
    return torch_adapter.to_numpy(leaf)


def _where(path: tuple[str, ...]) -> str:
    return SEP.join(path) if path else "the top level"


def _encode(x: Any, path: tuple[str, ...], found: list[tuple[str, Leaf, Node]] | None, depth: int) -> Node:
    """The node for ``x``; tensor leaves are appended to ``found`` (None: no
    tensors allowed here)."""
    node = encode_scalar(x)
    if node is not None:
        if node["t"] == "str":
            _check_utf8(x, path, "string")
        elif node["t"] == "int":
            _check_int_encodable(x, path)
        return node
    t = type(x)
    if t is dict or t is OrderedDict:
        if depth >= MAX_DEPTH:
            raise InvalidInputError(f"state nested deeper than {MAX_DEPTH} levels at {_where(path)} "
                                    "(is there a reference cycle?)")
        items = []
        for k, v in x.items():
            key = _dict_key(k, path)
            items.append([key, _encode(v, path + (str(key),), found, depth + 1)])
        node = {"t": "dict" if t is dict else "odict", "v": items}
        # torch's state_dict() keeps module versions in this attribute, and
        # load_state_dict() reads them: keep it as torch.save does.
        meta = getattr(x, "_metadata", None)
        if t is OrderedDict and meta is not None:
            node["_metadata"] = _encode(meta, path + ("_metadata",), None, depth + 1)
        return node
    if t is list or t is tuple:
        if depth >= MAX_DEPTH:
            raise InvalidInputError(f"state nested deeper than {MAX_DEPTH} levels at {_where(path)} "
                                    "(is there a reference cycle?)")
        return {"t": t.__name__, "v": [_encode(v, path + (str(i),), found, depth + 1) for i, v in enumerate(x)]}

    if isinstance(x, (np.ndarray, np.generic)):  # a numpy scalar is a 0-d array in the file
        node = {"t": "numpy"}
        try:
            spec_for(x.dtype)
        except UnsupportedDtypeError as exc:
            raise UnsupportedDtypeError(f"{exc} (at {_where(path)})") from None
    elif torch_adapter.is_tensor(x):
        node = {"t": "torch", **torch_adapter.describe(x, _where(path))}
    else:
        raise InvalidInputError(f"cannot save {type(x).__module__}.{type(x).__qualname__} at {_where(path)}; "
                                f"supported: {_LEAF_HELP}")
    if found is None:
        raise InvalidInputError(f"a tensor cannot be saved at {_where(path)}")
    key = SEP.join(path)
    tensor_names.require_no_nul(key, "tensor key")
    found.append((key, x, node))
    return node


def _check_int_encodable(x: int, path: tuple[str, ...]) -> None:
    # JSON writes ints in decimal, and Python refuses to print ints longer
    # than its digit limit (4300 by default): say so here, naming the leaf.
    limit = sys.get_int_max_str_digits()
    if limit and x.bit_length() > limit * 3.32:  # log2(10) bits per digit
        try:
            str(x)
        except ValueError:
            raise InvalidInputError(f"int at {_where(path)} has more than {limit} digits, "
                                    "more than JSON can encode here") from None


def _dict_key(k: object, path: tuple[str, ...]) -> str | int:
    if isinstance(k, str):
        _check_utf8(k, path, "key")
        return str(k)
    if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
        return int(k)
    raise InvalidInputError(f"dict keys must be str or int, got {type(k).__name__} {k!r} at {_where(path)}")


def _check_utf8(text: str, path: tuple[str, ...], what: str) -> None:
    tensor_names.require_utf8(text, what, f" at {_where(path)}")


# -- loading -------------------------------------------------------------------------


def parse(tree: object, names: Collection[str]) -> tuple[Node, list[str]]:
    """Validate a stored tree against the file's tensor names.

    Every tensor of the file must appear exactly once.

    Parameters
    ----------
    tree : object
        What the file stores under ``TREE_KEY``.
    names : Collection of str
        The file's tensor names.

    Returns
    -------
    root : dict of str to Any
        The root node.
    keys : list of str
        The tensor keys, in tree order.

    Raises
    ------
    FormatError
        Anything malformed: a bad node, a key the file lacks or names twice,
        a tensor the tree leaves out.
    UnsupportedVersionError
        The tree is of a newer version than this lazystore reads.
    """
    if not isinstance(tree, dict):
        raise FormatError(f"corrupt tree: {TREE_KEY} is not a JSON object")
    version = tree.get("version")
    if type(version) is not int:
        raise FormatError(f"corrupt tree: version {version!r}")
    if version != TREE_VERSION:
        raise UnsupportedVersionError(
            f"the nested structure is version {version}; this lazystore reads version {TREE_VERSION}: "
            "a newer lazystore is needed (the tensors themselves are readable with ls.open)")
    if "root" not in tree:
        raise FormatError("corrupt tree: no root")
    keys: list[str] = []
    _check_node(tree["root"], keys, 0, tensors_allowed=True)
    names = set(names)
    seen: set[str] = set()
    for key in keys:
        if key not in names:
            raise FormatError(f"corrupt tree: it names tensor {key!r}, which is not in the file")
        if key in seen:
            raise FormatError(f"corrupt tree: tensor {key!r} appears twice")
        seen.add(key)
    if len(seen) != len(names):
        missing = sorted(names - seen)[:5]
        raise FormatError(f"corrupt tree: tensors missing from it, e.g. {missing}")
    return tree["root"], keys


def _check_node(node: object, keys: list[str], depth: int, tensors_allowed: bool) -> None:
    if not isinstance(node, dict) or type(node.get("t")) is not str:
        raise FormatError(f"corrupt tree: node {_short(node)} is not an object with a type")
    t = node["t"]
    if t in SCALAR_TYPES:
        decode_scalar(node)
        return
    if t in TENSOR_TYPES:
        if not tensors_allowed:
            raise FormatError("corrupt tree: a tensor inside _metadata")
        key = node.get("key")
        if type(key) is not str:
            raise FormatError(f"corrupt tree: tensor node {_short(node)} without a str key")
        for flag in ("requires_grad", "parameter"):
            if flag in node and type(node[flag]) is not bool:
                raise FormatError(f"corrupt tree: {flag} of tensor {key!r} is not a bool")
        keys.append(key)
        return
    if t not in CONTAINER_TYPES:
        raise FormatError(f"corrupt tree: unknown node type {t!r}")
    if depth >= MAX_DEPTH:
        raise FormatError(f"corrupt tree: nested deeper than {MAX_DEPTH} levels")
    items = node.get("v")
    if type(items) is not list:
        raise FormatError(f"corrupt tree: {t} node without a list of items")
    if t in ("dict", "odict"):
        seen = set()
        for item in items:
            if type(item) is not list or len(item) != 2 or type(item[0]) not in (str, int):
                raise FormatError(f"corrupt tree: dict item {_short(item)} is not a [str or int key, node] pair")
            if item[0] in seen:
                raise FormatError(f"corrupt tree: duplicate dict key {item[0]!r}")
            seen.add(item[0])
            _check_node(item[1], keys, depth + 1, tensors_allowed)
        if "_metadata" in node:
            if t != "odict":
                raise FormatError("corrupt tree: _metadata on a node that is not an odict")
            _check_node(node["_metadata"], keys, depth + 1, tensors_allowed=False)
    else:
        for child in items:
            _check_node(child, keys, depth + 1, tensors_allowed)


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


_MISSING = object()
_EMPTY = {"dict": dict, "odict": OrderedDict, "list": list, "tuple": tuple}


def build(root: Node, arrays: Mapping[str, np.ndarray], make_torch: Callable[[np.ndarray, Node], object],
          selected: Collection[str] | None = None) -> Any:
    """The object a validated tree describes, its tensor leaves taken from ``arrays``.

    Parameters
    ----------
    root : dict of str to Any
        The root node, as :func:`parse` returns it.
    arrays : Mapping of str to numpy.ndarray
        The tensors, by key.
    make_torch : callable
        ``make_torch(array, node)``: the torch tensor of a torch leaf.
    selected : Collection of str, optional
        Tensor keys: the result holds only those tensors and the containers
        on their paths; scalars and containers without a selected tensor
        are left out, and lists and tuples keep the selected elements in
        order.

    Returns
    -------
    object
        The nested state. The top-level container is always returned (maybe
        empty); a top-level tensor that is not selected gives None.
    """
    value = _build(root, arrays, make_torch, selected)
    if value is _MISSING:
        empty = _EMPTY.get(root["t"])
        return empty() if empty is not None else None
    return value


def _build(node: Node, arrays: Mapping[str, np.ndarray], make_torch: Callable[[np.ndarray, Node], object],
           selected: Collection[str] | None) -> Any:
    t = node["t"]
    if t in TENSOR_TYPES:
        key = node["key"]
        if selected is not None and key not in selected:
            return _MISSING
        arr = arrays[key]
        return arr if t == "numpy" else make_torch(arr, node)
    if t in SCALAR_TYPES:
        return decode_scalar(node) if selected is None else _MISSING
    if t in ("dict", "odict"):
        out: Any = {} if t == "dict" else OrderedDict()
        for key, child in node["v"]:
            value = _build(child, arrays, make_torch, selected)
            if value is not _MISSING:
                out[key] = value
        if "_metadata" in node and (selected is None or out):
            out._metadata = _build(node["_metadata"], arrays, make_torch, None)
    else:
        out = [v for v in (_build(c, arrays, make_torch, selected) for c in node["v"]) if v is not _MISSING]
        if t == "tuple":
            out = tuple(out)
    if selected is not None and not out:
        return _MISSING
    return out


def has_torch(root: Node, selected: Collection[str] | None = None) -> bool:
    """Whether the tree holds a torch tensor (among ``selected`` keys, if given).

    Parameters
    ----------
    root : dict of str to Any
        The root node.
    selected : Collection of str, optional
        Only these tensor keys count.

    Returns
    -------
    bool
        True when a torch leaf is found.
    """
    stack = [root]
    while stack:
        node = stack.pop()
        t = node["t"]
        if t == "torch" and (selected is None or node["key"] in selected):
            return True
        if t in ("dict", "odict"):
            stack.extend(child for _, child in node["v"])
        elif t in ("list", "tuple"):
            stack.extend(node["v"])
    return False
