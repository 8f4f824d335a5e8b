"""Archives that are not lazy checkpoints: torch zip files and ``.npz``.

They are read only to be converted. Nothing here ever unpickles:

- torch ``.pt``/``.pth``/``.bin`` zips go through
  ``torch.load(path, weights_only=True, mmap=True, map_location="cpu")``
  and nothing else. torch's weights-only unpickler accepts tensors and
  plain containers and refuses any other global, so a pickle that tries to
  run code fails (as FormatError) before anything runs. Legacy (pre-zip)
  torch pickles are refused: they cannot be memory-mapped.
- ``.npz`` members are read with ``allow_pickle=False`` semantics (object
  arrays are refused), each streamed once (:mod:`lazystore.interop.npz`).

:func:`open_archive` gives an :class:`ArraysView`, the same Mapping
interface as a checkpoint view, so the command line converts, lists and
diffs them like any checkpoint.
"""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Sequence
from contextlib import contextmanager

import numpy as np

from lazystore._core import frameworks
from lazystore._core import torch_arrays as torch_adapter
from lazystore._core.torch_refusals import refusal_reason
from lazystore.errors import FormatError
from lazystore.interop import npz, safetensors
from lazystore.views import tree
from lazystore.views.arrays import ArraysView
from lazystore.views.base import TensorInfo

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTOCOLS = (b"\x02", b"\x03", b"\x04", b"\x05")


def archive_format(path) -> str | None:
    """"torch" or "npz" for a local file that is one (by content), else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except (OSError, TypeError):
        return None
    # A pickle (torch.save's legacy format) starts with PROTO (0x80) and a
    # protocol number; so may a safetensors header length (0x0280 = 640
    # bytes), whose JSON header then starts at byte 8.
    if head[:1] == b"\x80" and head[1:2] in PICKLE_PROTOCOLS and not safetensors.looks_like(head):
        return "torch"
    if head[:4] != ZIP_MAGIC:
        return None
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        return "torch"
    if all(n.endswith(".npy") for n in names):
        return "npz"
    return None


def load_torch(path, *, map_location="cpu", safe_globals: Sequence[type] = ()):
    """The object of a torch zip file, through ``torch.load(weights_only=True)`` only.

    ``map_location`` is torch.load's. ``safe_globals`` are classes the
    weights-only unpickler may also rebuild (callers pass only classes whose
    rebuilding runs no code of the file's choosing, e.g. pathlib paths),
    allowed for this load only (:func:`_allowing`)."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head != ZIP_MAGIC:
        raise FormatError(f"{path}: not a torch zip file (torch.save's format since PyTorch 1.6); "
                          "lazystore reads no other torch format")
    torch = torch_adapter.require()
    try:
        with _allowing(torch, safe_globals):
            return torch.load(path, weights_only=True, mmap=True, map_location=map_location)
    except Exception as exc:  # noqa: BLE001 - anything torch refuses is bad input
        raise FormatError(f"{path}: torch.load(weights_only=True) refused it: {refusal_reason(exc)}") from None


# torch keeps one process-wide allowlist; loads that extend it take turns.
_ALLOWLIST = threading.Lock()


@contextmanager
def _allowing(torch, classes: Sequence[type]):
    """Allow ``classes`` in torch's weights-only unpickler for the block.
    torch's own ``safe_globals`` context removes its classes on exit, even
    ones the user had allowed before: so only the missing ones go in (and
    come out). Another thread's torch.load meanwhile sees them allowed too:
    harmless, as callers only allow classes that run no code."""
    if not classes:
        yield
        return
    with _ALLOWLIST:
        allowed = torch.serialization.get_safe_globals()
        with torch.serialization.safe_globals([c for c in classes if c not in allowed]):
            yield


def _info(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> TensorInfo:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes, stored_nbytes=nbytes,
                      compression=None, chunk_count=1, offset=0)


def open_torch(path) -> ArraysView:
    """A view of a torch zip's tensors, keyed as :func:`lazystore.save` would
    name them; nested state keeps its structure (``system_metadata``), and
    a flat dict of tensors is a flat torch checkpoint (marked there too)."""
    obj = load_torch(path)
    system: dict = {}  # system_metadata entries: the framework, or the tree
    if tree.is_flat(obj):
        structure, leaves = None, obj
    elif tree.is_flat_torch(obj):  # a state_dict: a flat torch checkpoint, as ls.save writes it
        structure, leaves = None, obj
        system = {frameworks.FRAMEWORK_KEY: frameworks.TORCH}
    else:
        try:
            structure, leaves = tree.flatten(obj)
        except Exception as exc:  # noqa: BLE001 - e.g. a type lazystore cannot store
            raise FormatError(f"{path}: cannot convert its contents: {exc}") from None
    arrays = {k: tree.as_array(v) for k, v in leaves.items()}
    infos = {k: _info(k, a.dtype, a.shape) for k, a in arrays.items()}
    if structure is not None:
        system = {tree.TREE_KEY: structure}
    return ArraysView(str(path), infos, arrays.__getitem__, fmt="torch", system_metadata=system)


def open_npz(path) -> ArraysView:
    """A view of an ``.npz``; members are read (never unpickled) when asked
    for, each streamed once, in order, by copy and diff (see
    :mod:`lazystore.interop.npz`)."""
    archive = npz.NpzArchive(path)
    infos = {m.key: _info(m.key, m.dtype, m.shape) for m in archive.members.values()}
    return ArraysView(str(path), infos, archive.whole, fmt="npz", release=archive.close, read_part=archive.part)


def open_archive(path) -> ArraysView:
    """The view of a torch zip or npz archive (see :func:`archive_format`)."""
    kind = archive_format(path)
    if kind == "torch":
        return open_torch(path)
    if kind == "npz":
        return open_npz(path)
    raise FormatError(f"{path}: not a torch zip or .npz archive")
