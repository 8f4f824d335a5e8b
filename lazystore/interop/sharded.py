"""Folders of shards: one checkpoint split over several files.

A sharded folder holds shard files and an index naming, for each tensor,
the shard that holds it:

- lazystore's own: ``lazystore.index.json`` beside ``model-00001-of-00003.lzy``
  ... (see docs/format.md, "Sharded folders");
- Hugging Face's: ``model.safetensors.index.json`` beside safetensors shards.

:func:`open_folder` opens every shard as a file (each by content, as
``ls.open`` does) and gives a :class:`ShardedView`: the same interface as a one-file
view, over all the shards. :class:`ShardedWriter` writes a lazystore sharded
folder: shards first (each atomic), the index last (atomic), and shards of
an older save that the new index does not name removed only after it.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path

from lazystore._native import layout as fmt
from lazystore._core import strict_json
from lazystore.errors import FormatError, InvalidInputError
from lazystore.sinks import CloseOrAbort, fsync_dir, open_sink
from lazystore.interop.detect import open_file
from lazystore.views.sharded import ShardedView
from lazystore._native.writer import Writer

INDEX_NAME = "lazystore.index.json"
HF_INDEX_NAME = "model.safetensors.index.json"
INDEX_FORMAT = "lazystore-sharded"
INDEX_VERSION = 1
# Every shard of a save records the save's id; the index names it too, so a
# folder mixing shards of two saves (a crash mid-save) is refused, not mixed.
SHARD_KEY = fmt.RESERVED_METADATA_PREFIX + "_shard__"
SHARD_NAME = re.compile(r"model-(\d{5})-of-(\d{5})\.lzy")
MAX_INDEX_JSON = 1 << 30


def shard_name(i: int, n: int) -> str:
    return f"model-{i:05d}-of-{n:05d}.lzy"


def is_sharded_folder(path) -> bool:
    return os.path.isdir(path) and any(os.path.isfile(os.path.join(path, n)) for n in (INDEX_NAME, HF_INDEX_NAME))


def _read_json(path: Path) -> dict:
    if path.stat().st_size > MAX_INDEX_JSON:
        raise FormatError(f"{path}: index of more than {MAX_INDEX_JSON} bytes")
    try:
        # Strict JSON, as for a file's metadata: no NaN / Infinity (its
        # metadata must read back as the file's would), and no duplicate
        # member names, as in safetensors headers: a weight_map naming a
        # tensor twice lies about one of the two shards.
        value = strict_json.loads(path.read_bytes())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FormatError(f"{path}: corrupt index: {exc}") from None
    if not isinstance(value, dict):
        raise FormatError(f"{path}: corrupt index: not a JSON object")
    return value




def _is_file_name(f: str) -> bool:
    """Could ``f`` name a file directly inside the folder? The index is
    untrusted: a name that escapes the folder, holds a NUL, cannot be encoded
    for the file system or is longer than a file name can be (which makes
    ``stat`` raise OSError, not report a missing file) is corrupt."""
    if not f or os.path.basename(f) != f or f in (".", "..") or "\0" in f:
        return False
    try:
        return len(os.fsencode(f)) <= 255  # NAME_MAX of Linux and macOS file systems
    except UnicodeError:  # e.g. a lone surrogate from a JSON escape
        return False


def open_folder(folder, *, verify: bool = False) -> ShardedView:
    """The view of a sharded folder (lazystore's or Hugging Face's)."""
    folder = Path(folder)
    ours = folder / INDEX_NAME
    index_path = ours if ours.is_file() else folder / HF_INDEX_NAME
    if not index_path.is_file():
        raise FormatError(f"{folder}: a folder, but not a sharded checkpoint (no {INDEX_NAME} "
                          f"or {HF_INDEX_NAME})")
    index = _read_json(index_path)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FormatError(f"{index_path}: corrupt index: weight_map is not an object of names to files")
    metadata = index.get("metadata") or {}
    system = index.get("system_metadata") or {}
    if not isinstance(metadata, dict) or not isinstance(system, dict):
        raise FormatError(f"{index_path}: corrupt index: metadata is not an object")
    save_id = index.get("save_id") if index_path == ours else None
    files = list(dict.fromkeys(weight_map.values()))
    for f in files:
        if not _is_file_name(f):
            raise FormatError(f"{index_path}: corrupt index: shard {f!r} is not a file name in the folder")
    views: list = []
    owner: dict[str, object] = {}
    try:
        for i, f in enumerate(files):
            path = folder / f
            if not path.is_file():
                raise FormatError(f"{index_path}: shard {f} is missing")
            view = open_file(path, verify=verify)
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
    kind = "lazystore" if index_path == ours else (views[0].format if views else "safetensors")
    return ShardedView(str(folder), views, order, metadata=metadata, system_metadata=system,
                       format=f"{kind} (sharded)")


class ShardedWriter(CloseOrAbort):
    """Write a lazystore sharded folder, one tensor at a time.

    A shard is closed once the next tensor would take it past
    ``max_shard_size`` bytes (a tensor larger than that gets a shard of its
    own). Interface of :class:`~lazystore.writer.Writer`; ``writer_options``
    go to each shard's Writer.
    """

    def __init__(self, folder, *, max_shard_size: int | None = None, metadata: Mapping | None = None,
                 **writer_options):
        if max_shard_size is not None and max_shard_size <= 0:
            raise InvalidInputError(f"max_shard_size must be positive, got {max_shard_size}")
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise InvalidInputError(f"{folder}: sharded output needs a folder, and this is a file")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.metadata = dict(metadata or {})
        self.system_metadata: dict = {}
        self.path = self.folder
        self._max = max_shard_size
        self._options = writer_options
        self._save_id = uuid.uuid4().hex
        self._done: list[Path] = []  # finished shards, under temporary names
        self._weight_map: dict[str, int] = {}
        self._current: Writer | None = None
        self._size = 0
        self._closed = False

    def _tmp_name(self, i: int) -> Path:
        return self.folder / f".model-{i:05d}.{self._save_id}.lzy"

    def _open_shard(self) -> None:
        i = len(self._done) + 1
        self._current = Writer(self._tmp_name(i), metadata=self.metadata, **self._options)
        self._current.system_metadata[SHARD_KEY] = {"save_id": self._save_id, "shard": i}
        self._size = 0

    def _finish_shard(self) -> None:
        if self._current is not None:
            self._current.close()
            self._done.append(Path(self._current.path))
            self._current = None

    def add(self, name: str, array, **options) -> None:
        if self._closed:
            from lazystore.errors import ClosedError

            raise ClosedError(f"writer for {self.folder} is closed")
        if name in self._weight_map:
            raise InvalidInputError(f"duplicate tensor name {name!r}")
        nbytes = getattr(array, "nbytes", 0)
        if self._current is not None and self._max is not None and self._size and nbytes and self._size + nbytes > self._max:
            self._finish_shard()
        if self._current is None:
            self._open_shard()
        self._current.add(name, array, **options)
        self._size += nbytes
        self._weight_map[name] = len(self._done) + 1

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._current is None and not self._done:
                self._open_shard()  # an empty checkpoint still has one shard
            self._finish_shard()
            n = len(self._done)
            names = [shard_name(i, n) for i in range(1, n + 1)]
            for tmp, final in zip(self._done, names):
                os.replace(tmp, self.folder / final)
            fsync_dir(self.folder)
            index = {
                "format": INDEX_FORMAT,
                "version": INDEX_VERSION,
                "save_id": self._save_id,
                "metadata": self.metadata,
                "system_metadata": self.system_metadata,
                "weight_map": {k: names[i - 1] for k, i in self._weight_map.items()},
            }
            sink = open_sink(self.folder / INDEX_NAME)
            try:
                sink.write(json.dumps(index, ensure_ascii=False, indent=1).encode("utf-8"))
                sink.commit()
            except BaseException:
                sink.abort()
                raise
            self._closed = True
            keep = set(names)
            for p in self.folder.iterdir():  # shards of an older save with another count
                if SHARD_NAME.fullmatch(p.name) and p.name not in keep:
                    p.unlink(missing_ok=True)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        if self._current is not None:
            self._current.abort()
            self._current = None
        for tmp in self._done:
            tmp.unlink(missing_ok=True)
        self._done = []
        self._closed = True

