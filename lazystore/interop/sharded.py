"""Folders of shards: one checkpoint split over several files.

A sharded folder holds shard files and an index naming, for each tensor,
the shard that holds it:

- lazystore's own: ``lazystore.index.json`` beside
  ``model-00001-of-00003-<save id>.lzy`` ... (see docs/format.md, "Sharded
  folders"), written by :mod:`lazystore.interop.sharded_writer`;
- Hugging Face's: ``model.safetensors.index.json`` beside safetensors shards.

:func:`open_folder` opens every shard as a file (each by content, as
``ls.open`` does) and gives a :class:`ShardedView`: the same interface as a one-file
view, over all the shards. A save that replaces the folder's checkpoint
while it is being opened makes it read the new index and start again.
"""

from __future__ import annotations

import os
from pathlib import Path

from lazystore._core import strict_json
from lazystore._core.file_names import is_plain_file_name
from lazystore._native import layout as fmt
from lazystore.errors import FormatError
from lazystore.interop.detect import open_view
from lazystore.sources import open_in_folder
from lazystore.views.base import ViewBase
from lazystore.views.sharded import ShardedView

INDEX_NAME = "lazystore.index.json"
HF_INDEX_NAME = "model.safetensors.index.json"
INDEX_FORMAT = "lazystore-sharded"
INDEX_VERSION = 1
# Every shard of a save records the save's id; the index names it too, so a
# folder mixing shards of two saves (a crash mid-save) is refused, not mixed.
SHARD_KEY = fmt.RESERVED_METADATA_PREFIX + "_shard__"
MAX_INDEX_JSON = 1 << 30
# Times open_folder starts again when a save replaces the checkpoint under it.
OPEN_ATTEMPTS = 5


def read_index_json(path: Path) -> dict:
    """A sharded folder's index file, parsed and checked to be a JSON object."""
    return _read_index_stamped(path)[0]


def _read_index_stamped(path: Path, anchor=None) -> tuple[dict, tuple]:
    """The index and a stamp of the file it came from (inode, mtime, size):
    a save replaces the index by renaming a new file over it. An ``anchor``
    (a folder's signature) checks the bytes before they are parsed."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size > MAX_INDEX_JSON:
            raise FormatError(f"{path}: index of more than {MAX_INDEX_JSON} bytes")
        data = f.read()
    if anchor is not None:
        anchor.check_index_json(data, path)
    try:
        # Strict JSON, as for a file's metadata: no NaN / Infinity (its
        # metadata must read back as the file's would), and no duplicate
        # member names, as in safetensors headers: a weight_map naming a
        # tensor twice lies about one of the two shards.
        value = strict_json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{path}: corrupt index: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError(f"{path}: corrupt index: not a JSON object")
    return value, _stamp(st)


def _stamp(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def _index_changed(path: Path, stamp: tuple) -> bool:
    try:
        return _stamp(os.stat(path)) != stamp
    except OSError:
        return True


def open_folder(folder, *, verify: bool = False, mmap: bool = True, anchor=None,
                encryption_key: bytes | None = None) -> ShardedView:
    """The view of a sharded folder (lazystore's or Hugging Face's);
    ``encryption_key`` opens every shard (each is encrypted under its own salt).

    A save may replace the folder's checkpoint while it is opened, removing
    the shards the old index named once the new index is in place; then the
    new index is read and the opening starts again (a few times at most).

    An ``anchor`` (a folder's signature: :mod:`lazystore.signing.anchor`)
    checks lazystore's index file, then each shard's index as it is opened."""
    folder = Path(folder)
    ours = folder / INDEX_NAME
    for attempt in range(1, OPEN_ATTEMPTS + 1):
        index_path = ours if ours.is_file() or anchor is not None else folder / HF_INDEX_NAME
        if not index_path.is_file():
            raise FormatError(f"{folder}: a folder, but not a sharded checkpoint (no {INDEX_NAME} "
                              f"or {HF_INDEX_NAME})")
        index, stamp = _read_index_stamped(index_path, anchor)
        try:
            return _open_shards(folder, index_path, index, index_path == ours, verify, mmap, anchor, encryption_key)
        except (FormatError, FileNotFoundError):
            if attempt < OPEN_ATTEMPTS and _index_changed(index_path, stamp):
                continue
            raise
    raise AssertionError("unreachable")


def _open_shards(folder: Path, index_path: Path, index: dict, ours: bool, verify: bool, mmap: bool,
                 anchor=None, encryption_key: bytes | None = None) -> ShardedView:
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError(f"{index_path}: corrupt index: weight_map is not an object of names to files")
    metadata = index.get("metadata") or {}
    system = index.get("system_metadata") or {}
    if not isinstance(metadata, dict) or not isinstance(system, dict):
        raise FormatError(f"{index_path}: corrupt index: metadata is not an object")
    save_id = index.get("save_id") if ours else None
    files = list(dict.fromkeys(weight_map.values()))
    for f in files:
        if not is_plain_file_name(f):  # said by name, before any is opened
            raise FormatError(f"{index_path}: corrupt index: shard {f!r} is not a file name in the folder")
    views: list[ViewBase] = []
    owner: dict[str, ViewBase] = {}
    try:
        for f in files:
            path = folder / f
            shard_anchor = anchor.shard(f) if anchor is not None else None
            # By the name the index gives: a regular file in the folder,
            # never a FIFO or a link out of it (see sources.safe_files).
            try:
                source = open_in_folder(folder, f, mmap=mmap)
            except FileNotFoundError:
                raise FormatError(f"{index_path}: shard {f} is missing") from None
            except FormatError as exc:
                raise FormatError(f"{index_path}: shard {f} cannot be read: {exc}") from None
            view = open_view(source, verify=verify, anchor=shard_anchor, encryption_key=encryption_key)
            views.append(view)
            if save_id is not None:
                mark = view.system_metadata.get(SHARD_KEY)
                if not isinstance(mark, dict) or mark.get("save_id") != save_id:
                    raise FormatError(f"{path}: belongs to another save than {index_path} "
                                      "(an interrupted save?): shards and index do not match")
            for name in view:
                if name in owner:
                    raise FormatError(f"{folder}: tensor {name!r} is in two shards")
                if weight_map.get(name) != f:
                    raise FormatError(f"{index_path}: weight_map does not match shard {f}: it holds {name!r}")
                owner[name] = view
        missing = [n for n in weight_map if n not in owner]
        if missing:
            raise FormatError(f"{index_path}: tensor {missing[0]!r} is in no shard")
    except BaseException:
        for v in views:
            v.close()
        raise
    order = {n: owner[n] for n in weight_map}  # the index's order
    kind = "lazystore" if ours else (views[0].format if views else "safetensors")
    return ShardedView(str(folder), views, order, metadata=metadata, system_metadata=system,
                       format=f"{kind} (sharded)")
