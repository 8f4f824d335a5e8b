"""Writing a sharded folder so that a failed or killed save never costs the
previous one (docs/format.md §19).

The index, committed last by an atomic rename, is the only switch between
the old save and the new one:

1. Shards are written into a hidden staging folder of this save,
   ``.lazystore-save-<save id>``, each atomically (lazystore's own writer).
   The save holds a shared ``flock`` on the staging folder for as long as
   it lives, which tells other saves it is not a dead one's.
2. Publishing: the shards are renamed into the folder under names that
   carry the save id (``model-00001-of-00003-<12 hex>.lzy``), so they never
   replace the old save's shards; the folder is fsync'd; then the index is
   written atomically. A reader sees the old index naming old shards, or
   the new index naming new ones.
3. Only after the new index is durable are files no index names removed:
   the old save's shards, and what dead saves left (staging folders nobody
   holds, published shards no index names). What dead saves left is also
   removed when the next save starts, so a save that fails cleans up too.

Publishing and clean-up take a lock on the folder itself (shared while
publishing, exclusive to clean up; see :mod:`lazystore.sinks.partials`), so
a clean-up never reads an index that is being replaced.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lazystore._core import arguments, crypto_digest, tensor_names
from lazystore._core.aead import resolve_key
from lazystore._core.chunking import DEFAULT_CHUNK_BYTES
from lazystore._native.layout import DEFAULT_ALIGNMENT
from lazystore.errors import ClosedError, InvalidInputError
from lazystore.interop.sharded import INDEX_FORMAT, INDEX_NAME, INDEX_VERSION, SHARD_KEY, read_index_json
from lazystore.sinks import fsync_dir, open_sink
from lazystore.sinks.partials import folder_lock, remove_stale_held
from lazystore.writing.checks import check_metadata, check_options
from lazystore.writing.interface import TensorWriter
from lazystore.writing.writer import Writer

STAGING_PREFIX = ".lazystore-save-"
STAGING_NAME = re.compile(re.escape(STAGING_PREFIX) + r"(?P<id>[0-9a-f]{32})")
# Shards this writer publishes, and the names earlier versions used (no id).
SHARD_NAME = re.compile(r"model-\d{5}-of-\d{5}(?:-(?P<id>[0-9a-f]{12}))?\.lzy")
SHARD_ID_CHARS = 12


def shard_name(i: int, n: int, save_id: str) -> str:
    """The file name a save publishes its ``i``-th shard of ``n`` under.

    Parameters
    ----------
    i : int
        The shard's number, from 1.
    n : int
        How many shards the save has.
    save_id : str
        The save's id (32 hex digits); the name carries its first 12.

    Returns
    -------
    str
        ``model-<i>-of-<n>-<12 hex>.lzy``.
    """
    return f"model-{i:05d}-of-{n:05d}-{save_id[:SHARD_ID_CHARS]}.lzy"


class ShardedWriter(TensorWriter):
    """Write a lazystore sharded folder, one tensor at a time.

    The interface of :class:`~lazystore.Writer`. The writer options go to
    each shard's Writer, and are checked here, before the folder is touched.
    One sharded save into a folder at a time is the intended use; two at
    once both succeed, and the later index wins.

    Parameters
    ----------
    folder : str or os.PathLike
        The local folder (made if missing, with its parents).
    max_shard_size : int, optional
        A shard is closed once the next tensor would take it past this many
        bytes (a tensor larger than that gets a shard of its own); default
        one shard.
    metadata : Mapping, optional
        Any JSON object, recorded in the index and in every shard.
    compression : str, Codec or None, optional
        As :class:`~lazystore.Writer` takes it.
    compression_level : int, optional
        As :class:`~lazystore.Writer` takes it.
    alignment : int, optional
        As :class:`~lazystore.Writer` takes it.
    chunk_bytes : int, optional
        As :class:`~lazystore.Writer` takes it.
    digest : str, optional
        "blake3" or "sha256": chunk digests in every shard.
    encryption_key : optional
        Encrypt every shard; resolved once, and each shard is encrypted
        under its own salt, so no two shards share a chunk key.

    Raises
    ------
    InvalidInputError
        ``folder`` is a file, or an option is not one lazystore accepts.
    """

    def __init__(self, folder: str | os.PathLike[str], *, max_shard_size: int | None = None,
                 metadata: Mapping[str, Any] | None = None, compression: Any = None,
                 compression_level: int | None = None, alignment: int = DEFAULT_ALIGNMENT,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, digest: str | None = None,
                 encryption_key: Any = None) -> None:
        check_options(compression, compression_level, alignment, chunk_bytes)
        digest = crypto_digest.writer_digest(digest)
        encryption_key = resolve_key(encryption_key)
        if max_shard_size is not None:
            max_shard_size = arguments.integer("max_shard_size", max_shard_size, 1)
        metadata = check_metadata(metadata)  # as each shard's Writer will, before the folder is touched
        self.folder = Path(folder)
        if self.folder.exists() and not self.folder.is_dir():
            raise InvalidInputError(f"{folder}: sharded output needs a folder, and this is a file")
        # Folders this save makes, deepest first: an aborted first save leaves none behind.
        self._made = [f for f in (self.folder, *self.folder.parents) if not f.exists()]
        self.folder.mkdir(parents=True, exist_ok=True)
        # What killed saves left goes now, whether or not this save completes.
        remove_unreferenced(self.folder)
        self.metadata = metadata
        self.system_metadata: dict = {}
        self.path = self.folder
        self._max = max_shard_size
        self._options = {"compression": compression, "compression_level": compression_level,
                         "alignment": alignment, "chunk_bytes": chunk_bytes, "digest": digest,
                         "encryption_key": encryption_key}
        self._save_id = uuid.uuid4().hex
        self._staging = self.folder / f"{STAGING_PREFIX}{self._save_id}"
        self._staging_fd = _create_staging(self.folder, self._staging)
        self._staged: list[Path] = []  # finished shards, in the staging folder
        self._published: list[Path] = []  # shards renamed into the folder
        self._weight_map: dict[str, int] = {}
        self._current: Writer | None = None
        self._size = 0
        self._closed = False

    # -- writing ---------------------------------------------------------------

    def add(self, name: str, array: Any, **options: Any) -> None:
        """Append one tensor, to the shard it belongs to.

        Parameters
        ----------
        name : str
            The tensor's name, new in the checkpoint.
        array : array_like
            A numpy array or anything ``np.asarray`` takes.
        **options
            As :meth:`lazystore.Writer.add` takes them (``compression``).

        Raises
        ------
        ClosedError
            The writer is closed.
        InvalidInputError
            A name that is not a str, or one already added.
        """
        nbytes = getattr(array, "nbytes", None)
        if nbytes is None:  # lists, scalars: their size is their array's
            array = np.asarray(array)
            nbytes = array.nbytes
        self._shard_for(name, nbytes).add(name, array, **options)
        self._added(name, nbytes)

    def add_pieces(self, name: str, pieces: Iterable[Any], *, dtype: Any, shape: tuple[int, ...],
                   **options: Any) -> None:
        """Append one tensor in pieces, to the shard it belongs to.

        As :meth:`lazystore.Writer.add_pieces`.

        Parameters
        ----------
        name : str
            The tensor's name, new in the checkpoint.
        pieces : iterable of buffers
            The tensor's C-order bytes, in pieces of any size.
        dtype : numpy.dtype or str
            The tensor's dtype.
        shape : tuple of int
            The tensor's shape.
        **options
            As :meth:`lazystore.Writer.add_pieces` takes them
            (``compression``).

        Raises
        ------
        ClosedError
            The writer is closed.
        InvalidInputError
            A name already added, or pieces that do not add up to the shape.
        """
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        self._shard_for(name, nbytes).add_pieces(name, pieces, dtype=dtype, shape=shape, **options)
        self._added(name, nbytes)

    def _shard_for(self, name: str, nbytes: int) -> Writer:
        """The writer of the shard the next tensor goes to: a new shard once
        it would take the current one past ``max_shard_size``."""
        if self._closed:
            raise ClosedError(f"writer for {self.folder} is closed")
        tensor_names.require_new(name, self._weight_map)
        # An empty tensor never starts a shard; one larger than the limit gets its own.
        full = self._max is not None and self._size and nbytes and self._size + nbytes > self._max
        if self._current is not None and full:
            self._finish_shard()
        return self._current if self._current is not None else self._open_shard()

    def _added(self, name: str, nbytes: int) -> None:
        self._size += nbytes
        self._weight_map[name] = len(self._staged) + 1

    def close(self) -> None:
        """Publish the save (see the module's docstring), then clean up."""
        if self._closed:
            return
        try:
            if self._current is None and not self._staged:
                self._open_shard()  # an empty checkpoint still has one shard
            self._finish_shard()
            self._publish()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self._release_staging()
        remove_unreferenced(self.folder)

    def abort(self) -> None:
        """Discard this save; the folder keeps the previous one. Never raises."""
        if self._closed:
            return
        self._closed = True
        if self._current is not None:
            self._current.abort()
            self._current = None
        if not self._index_is_ours():  # a failure after the index rename published this save
            for path in self._published:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass  # never hide the error that made us abort; the next save removes it
        self._release_staging()
        for folder in self._made:
            try:
                folder.rmdir()  # only if empty: nothing anyone else put there is touched
            except OSError:
                break

    # -- internals -------------------------------------------------------------

    def _open_shard(self) -> Writer:
        """Start the next shard: the writer tensors go to from now on."""
        i = len(self._staged) + 1
        current = self._current = Writer(self._staging / f"{i:05d}.lzy", metadata=self.metadata, **self._options)
        current.system_metadata[SHARD_KEY] = {"save_id": self._save_id, "shard": i}
        self._size = 0
        return current

    def _finish_shard(self) -> None:
        if self._current is not None:
            self._current.close()
            self._staged.append(self._staging / f"{len(self._staged) + 1:05d}.lzy")
            self._current = None

    def _publish(self) -> None:
        n = len(self._staged)
        names = [shard_name(i, n, self._save_id) for i in range(1, n + 1)]
        index = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "save_id": self._save_id,
            "metadata": self.metadata,
            "system_metadata": self.system_metadata,
            "weight_map": {k: names[i - 1] for k, i in self._weight_map.items()},
        }
        text = json.dumps(index, ensure_ascii=False, indent=1).encode("utf-8")
        with folder_lock(self.folder, fcntl.LOCK_SH):
            for staged, name in zip(self._staged, names):
                os.replace(staged, self.folder / name)
                self._published.append(self.folder / name)
            fsync_dir(self.folder)  # the shards' names are durable before the index names them
            sink = open_sink(self.folder / INDEX_NAME)
            try:
                sink.write(text)
                sink.commit()
            except BaseException:
                sink.abort()
                raise

    def _index_is_ours(self) -> bool:
        try:
            return read_index_json(self.folder / INDEX_NAME).get("save_id") == self._save_id
        except Exception:  # noqa: BLE001 - no index, or not one we can read: not ours
            return False

    def _release_staging(self) -> None:
        shutil.rmtree(self._staging, ignore_errors=True)
        fd, self._staging_fd = self._staging_fd, -1
        if fd >= 0:
            try:
                os.close(fd)  # releases the lock
            except OSError:
                pass


def _create_staging(folder: Path, staging: Path) -> int:
    """Make and lock this save's staging folder; the folder lock keeps a
    clean-up from taking it for a dead save's between the two steps."""
    with folder_lock(folder, fcntl.LOCK_SH):
        staging.mkdir()
        fd = os.open(staging, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def remove_unreferenced(folder: Path) -> None:
    """Remove what no current save of a sharded folder needs.

    Dead saves' staging folders, the partial files of dead writers (an
    index write killed midway: the index's own sink cannot clean up, as the
    save holds the folder while it publishes), and shard files the folder's
    index does not name and that belong to no live save. Run when a sharded
    save starts and when it ends. Skipped when another save is publishing or
    cleaning up (it, or the next save, cleans up instead); shards are kept
    when the index cannot be read. Never raises for a folder it cannot lock.

    Parameters
    ----------
    folder : pathlib.Path
        The sharded folder.
    """
    try:
        with folder_lock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB):
            live = set()
            for entry in os.listdir(folder):
                m = STAGING_NAME.fullmatch(entry)
                if m is None:
                    continue
                if _held(folder / entry):
                    live.add(m["id"][:SHARD_ID_CHARS])
                else:
                    shutil.rmtree(folder / entry, ignore_errors=True)
            remove_stale_held(folder)
            try:
                named = set(read_index_json(folder / INDEX_NAME).get("weight_map", {}).values())
            except Exception:  # noqa: BLE001 - no index, or an unreadable one: keep every shard
                return
            for entry in os.listdir(folder):
                m = SHARD_NAME.fullmatch(entry)
                if m and entry not in named and m["id"] not in live:
                    (folder / entry).unlink(missing_ok=True)
    except OSError:
        pass  # busy, or the folder cannot be locked: leave everything


def _held(staging: Path) -> bool:
    """Does a live save hold this staging folder?"""
    try:
        fd = os.open(staging, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False
