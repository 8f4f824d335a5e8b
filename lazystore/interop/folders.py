"""What a local folder given to ``ls.open`` holds, decided in one place.

- A sharded checkpoint: an index (``lazystore.index.json``, or Hugging
  Face's ``model.safetensors.index.json``) beside its shards, opened by
  :func:`lazystore.interop.sharded.open_folder` as one view.
- One weights file beside other files: the most common Hugging Face layout
  (``config.json``, ``tokenizer.json``, ... and one ``model.safetensors``),
  opened as that file.

Anything else is a :class:`FormatError` that says what the folder holds.
"""

from __future__ import annotations

import os
from pathlib import Path

from lazystore._core.aead import resolve_key
from lazystore.errors import FormatError
from lazystore.interop.detect import open_file
from lazystore.interop.sharded import HF_INDEX_NAME, INDEX_NAME, SHARD_KEY, open_folder
from lazystore.sources import local_path

WEIGHT_SUFFIXES = (".safetensors", ".lzy")
# Files users meet beside weights or instead of them, which lazystore reads
# only to convert (never unpickling anything to open a folder).
CONVERTIBLE_SUFFIXES = (".bin", ".pt", ".pth", ".npz")
# How many names an error lists before it says how many more there are.
NAMES_SHOWN = 8


def open_path(path, *, verify: bool = False, storage_options=None, mmap: bool = True, anchor=None,
              encryption_key=None):
    """The view of the checkpoint at a path or URL: a file (lazystore or
    safetensors, told by content), or a local folder (see
    :func:`open_checkpoint_folder`). What ``ls.open`` does for a path, and
    what the converters open their input with. An ``anchor`` (a signature
    or pinned index digest: :mod:`lazystore.signing.anchor`) vouches for
    the index, of a file or of a sharded folder. ``encryption_key`` (32
    bytes, or a callable, called once here) opens an encrypted checkpoint."""
    key = resolve_key(encryption_key)
    try:
        return open_file(path, verify=verify, storage_options=storage_options, mmap=mmap,
                         anchor=anchor.file() if anchor is not None else None, encryption_key=key)
    except IsADirectoryError:  # only local paths can be folders
        return open_checkpoint_folder(local_path(path), verify=verify, mmap=mmap, anchor=anchor,
                                      encryption_key=key)


def open_checkpoint_folder(folder, *, verify: bool = False, mmap: bool = True, anchor=None,
                           encryption_key: bytes | None = None):
    """The view of the checkpoint a local folder holds: its shards as one
    view when it has an index, else its only weights file."""
    folder = Path(folder)
    if anchor is not None:
        return open_folder(folder, verify=verify, mmap=mmap, anchor=anchor.folder(folder),
                           encryption_key=encryption_key)
    if (folder / INDEX_NAME).is_file() or (folder / HF_INDEX_NAME).is_file():
        return open_folder(folder, verify=verify, mmap=mmap, encryption_key=encryption_key)
    names = _file_names(folder)
    weights = [n for n in names if n.endswith(WEIGHT_SUFFIXES)]
    if len(weights) > 1:
        raise FormatError(f"{folder}: a folder of {len(weights)} weight files and no {INDEX_NAME} or "
                          f"{HF_INDEX_NAME} ({_listed(weights)}): open one of them by its path")
    if not weights:
        others = [n for n in names if n.endswith(CONVERTIBLE_SUFFIXES)]
        hint = (f"; convert {_listed(others)} with `lazystore convert` (or lazystore.interop.from_torch, "
                "from_npz)") if others else ""
        raise FormatError(f"{folder}: a folder, but not a checkpoint: no {INDEX_NAME}, no {HF_INDEX_NAME} "
                          f"and no *.safetensors or *.lzy file{hint}")
    # By the path, as ls.open of that path would: a Hugging Face cache
    # snapshot holds links into its blobs folder, and the name came from
    # the folder the caller named, not from a file's bytes.
    view = open_file(folder / weights[0], verify=verify, mmap=mmap, encryption_key=encryption_key)
    if SHARD_KEY in view.system_metadata:
        # One shard of a sharded save whose index never landed: the save was
        # interrupted, and the shard alone is not the checkpoint.
        view.close()
        raise FormatError(f"{folder}: {weights[0]} is one shard of a sharded save, and the folder has no "
                          f"{INDEX_NAME} (an interrupted save?)")
    return view


def _file_names(folder: Path) -> list[str]:
    """The names in the folder that are not hidden (lazystore's temporary
    files are) and not folders, sorted."""
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if not e.name.startswith(".") and not e.is_dir())


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown if len(names) <= NAMES_SHOWN else f"{shown} and {len(names) - NAMES_SHOWN} more"


__all__ = ["open_checkpoint_folder"]
