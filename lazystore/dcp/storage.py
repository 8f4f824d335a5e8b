"""LazyStoreWriter: DCP's StorageWriter over lazystore files (the layout is
described in :mod:`lazystore.dcp`), and where a checkpoint's files are, which
:mod:`lazystore.dcp.reader` reads too."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from lazystore._core import torch_arrays as torch_adapter
from lazystore.codecs import codec_for
from lazystore.dcp import metadata as metadata_json
from lazystore.dcp.metadata import DCP_KEY, LazyStorageInfo, item_key
from lazystore.errors import InvalidInputError
from lazystore.sources import local_path
from lazystore.sources.fsspec import url_to_fs
from lazystore.writing.writer import Writer

METADATA_FILE = "metadata.lzy"
_RANK_FILE = re.compile(r"rank-\d{5,}\.lzy")
__all__ = ["METADATA_FILE", "LazyStorageInfo", "LazyStoreWriter", "rank_file"]


def rank_file(rank: int) -> str:
    """The file name of one rank's items.

    Parameters
    ----------
    rank : int
        The rank.

    Returns
    -------
    str
        ``rank-00000.lzy`` for rank 0, and so on.
    """
    return f"rank-{rank:05d}.lzy"


def metadata_file(rank: int | None) -> str:
    """The name of the metadata file: ``rank``'s own, or (None) the checkpoint's."""
    # use_collectives=False: each rank records its own metadata.
    return METADATA_FILE if rank is None else f"metadata-rank-{rank:05d}.lzy"


def join_path(base, name: str):
    """The path (or URL) of the file ``name`` in the checkpoint folder ``base``."""
    local = local_path(base)
    if local is not None:
        return os.path.join(local, name)
    return base.rstrip("/") + "/" + name


def _fs(base, storage_options):
    # Through lazystore's own helper: without the remote extra, a
    # MissingDependencyError naming it, not a raw ImportError.
    return url_to_fs(base, storage_options)[0]


def _exists(path, storage_options) -> bool:
    local = local_path(path)
    return os.path.exists(local) if local is not None else _fs(path, storage_options).exists(path)


def _remove(path, storage_options) -> None:
    local = local_path(path)
    if local is not None:
        if os.path.exists(local):
            os.remove(local)
    else:
        fs = _fs(path, storage_options)
        if fs.exists(path):
            fs.rm(path)


def _list(base, storage_options) -> list[str]:
    """The names of the files directly in a checkpoint folder (or URL prefix)."""
    local = local_path(base)
    if local is not None:
        return os.listdir(local)
    fs = _fs(base, storage_options)
    return [p.rstrip("/").rpartition("/")[2] for p in fs.ls(base, detail=False)]


def _checkpoint_id(path: str | os.PathLike[str]) -> str:
    return path if isinstance(path, str) else os.fspath(path)


def valid_checkpoint_id(checkpoint_id: object) -> bool:
    """Is ``checkpoint_id`` a folder or URL prefix a checkpoint can be at (a non-empty path)?"""
    return isinstance(checkpoint_id, (str, os.PathLike)) and bool(os.fspath(checkpoint_id))


@dataclasses.dataclass(frozen=True)
class _RankPlan:
    """The storage_data of a SavePlan: where this rank writes, and the save's id."""

    file: str
    save_id: str


class LazyStoreWriter(StorageWriter):
    """Save DCP checkpoints as lazystore files.

    DCP calls the methods below, in its order, on every rank; each rank
    streams its items into its own file, and the coordinator writes
    ``metadata.lzy`` last.

    Parameters
    ----------
    path : str or os.PathLike
        A folder (created if missing) or an fsspec URL prefix
        (``s3://bucket/ckpt``, with ``storage_options``).
    compression : {None, "auto", "zstd", "huffman"}, optional
        :class:`lazystore.Writer`'s, applied to every rank file.
    compression_level, chunk_bytes : int, optional
        :class:`lazystore.Writer`'s, applied to every rank file.
    storage_options : Mapping of str to Any, optional
        The fsspec options of a URL.
    overwrite : bool, optional
        False refuses a folder that already holds a checkpoint.

    Raises
    ------
    InvalidInputError
        An unknown ``compression`` or a bad ``compression_level``, refused
        here rather than on every rank after planning.
    """

    def __init__(self, path: str | os.PathLike[str], *, compression: str | None = None,
                 compression_level: int | None = None, chunk_bytes: int | None = None,
                 storage_options: Mapping[str, Any] | None = None, overwrite: bool = True) -> None:
        super().__init__()
        self.path = path
        self.compression = compression
        self.compression_level = compression_level
        self.chunk_bytes = chunk_bytes
        self.storage_options = dict(storage_options or {})
        self.overwrite = overwrite
        codec_for(compression, compression_level)  # fail now, not on every rank after planning
        self.save_id = uuid.uuid4().hex
        self.rank: int | None = None
        self.is_coordinator = False
        self.use_collectives = True

    # -- protocol ------------------------------------------------------------------

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Start a new save, with a new save id.

        Parameters
        ----------
        checkpoint_id : str or os.PathLike, optional
            The folder or URL prefix to write to from now on; None keeps
            ``path``.
        """
        if checkpoint_id:
            self.path = checkpoint_id
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Record this rank's part in the save.

        Parameters
        ----------
        is_coordinator : bool
            Whether this rank writes the checkpoint's metadata.
        *args
            Ignored.
        **kwargs
            ``rank`` and ``use_collectives``, as DCP passes them.
        """
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def storage_meta(self) -> StorageMeta | None:
        """The checkpoint id and save id DCP records in the metadata.

        Returns
        -------
        torch.distributed.checkpoint.metadata.StorageMeta
            ``path`` and this save's id.
        """
        return StorageMeta(checkpoint_id=_checkpoint_id(self.path), save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Create a local folder; without collectives, give this rank its file.

        Parameters
        ----------
        plan : torch.distributed.checkpoint.planner.SavePlan
            This rank's plan.

        Returns
        -------
        torch.distributed.checkpoint.planner.SavePlan
            The plan, naming this rank's file where no coordinator will.

        Raises
        ------
        InvalidInputError
            Without collectives, ``overwrite=False`` and this rank's metadata
            file already exists.
        """
        local = local_path(self.path)
        if local is not None:
            os.makedirs(local, exist_ok=True)
        if self.rank is not None and not self.use_collectives:
            self._check_existing(metadata_file(self.rank))
            plan = dataclasses.replace(plan, storage_data=_RankPlan(rank_file(self.rank), self.save_id))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Give each rank its file and the shared save id (on the coordinator).

        Parameters
        ----------
        plans : list of torch.distributed.checkpoint.planner.SavePlan
            The ranks' plans, in rank order.

        Returns
        -------
        list of torch.distributed.checkpoint.planner.SavePlan
            The plans, each naming its rank's file.

        Raises
        ------
        InvalidInputError
            ``overwrite=False`` and the folder already holds a checkpoint.
        """
        # The coordinator, before any rank writes: drop an older checkpoint's
        # metadata so a save that dies half-way leaves no checkpoint that
        # looks complete, then give each rank its file and the shared save id.
        self._check_existing(METADATA_FILE)
        return [plan if plan.storage_data is not None
                else dataclasses.replace(plan, storage_data=_RankPlan(rank_file(i), self.save_id))
                for i, plan in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Write this rank's items into its lazystore file, one tensor per item.

        Bytes items are stored as uint8 tensors; tensors are copied to the
        CPU first where they are elsewhere.

        Parameters
        ----------
        plan : torch.distributed.checkpoint.planner.SavePlan
            This rank's plan, as :meth:`prepare_global_plan` returned it.
        planner : torch.distributed.checkpoint.planner.SavePlanner
            What resolves each item to its data.

        Returns
        -------
        torch.futures.Future of list of WriteResult
            Done: where each item was written.
        """
        rank_plan: _RankPlan = plan.storage_data
        self.save_id = rank_plan.save_id
        results = []
        options: dict[str, Any] = {"compression": self.compression, "compression_level": self.compression_level,
                                   "storage_options": self.storage_options or None}
        if self.chunk_bytes is not None:
            options["chunk_bytes"] = self.chunk_bytes
        with Writer(join_path(self.path, rank_plan.file), **options) as w:
            w.system_metadata[DCP_KEY] = {"save_id": rank_plan.save_id, "file": rank_plan.file}
            # Bytes items first, then tensors largest first, as FileSystemWriter orders them.
            for item in plan.items:
                key = item_key(item.index)
                data = planner.resolve_data(item)
                if item.type == WriteItemType.BYTE_IO:
                    # torch's stub says BytesIO; a planner may give any bytes-like object
                    buf = data.getbuffer() if isinstance(data, io.BytesIO) else memoryview(data)  # type: ignore[arg-type]
                    arr = np.frombuffer(buf, dtype=np.uint8)
                else:
                    assert isinstance(data, torch.Tensor)  # resolve_data gives a tensor item its tensor
                    tensor = data.detach()
                    if tensor.device.type != "cpu":
                        tensor = tensor.to("cpu")
                    torch_adapter.describe(tensor.as_subclass(torch.Tensor), key)
                    arr = torch_adapter.to_numpy(tensor.contiguous())
                w.add(key, arr)
                results.append(WriteResult(index=item.index, size_in_bytes=arr.nbytes,
                                           storage_data=LazyStorageInfo(rank_plan.file, key)))
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Write the checkpoint's metadata, which marks it complete.

        Rank files an earlier save with more ranks left behind are removed
        afterwards.

        Parameters
        ----------
        metadata : torch.distributed.checkpoint.metadata.Metadata
            DCP's metadata of the save.
        results : list of list of WriteResult
            Every rank's :meth:`write_data` results.

        Raises
        ------
        InvalidInputError
            A part of the metadata has no safe JSON form.
        """
        storage = {}
        for wr_list in results:
            storage.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        if metadata.version is None:
            from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION

            metadata.version = CURRENT_DCP_VERSION
        doc = metadata_json.encode(metadata, self.save_id)
        name = metadata_file(self.rank if not self.use_collectives and self.rank is not None else None)
        with Writer(join_path(self.path, name), storage_options=self.storage_options or None) as w:
            w.system_metadata[DCP_KEY] = doc
        if name == METADATA_FILE:
            self._remove_unnamed_rank_files({info.relative_path for info in storage.values()})

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: object) -> bool:
        """Whether ``checkpoint_id`` can name a checkpoint here.

        Parameters
        ----------
        checkpoint_id : object
            What DCP was given as ``checkpoint_id``.

        Returns
        -------
        bool
            True for a non-empty str or path.
        """
        return valid_checkpoint_id(checkpoint_id)

    # -- internals --------------------------------------------------------------

    def _remove_unnamed_rank_files(self, named: set[str]) -> None:
        """Rank files of an earlier save with more ranks: the new metadata,
        durable now, names none of them. (Without collectives each rank
        writes its own metadata and none knows the world size, so such a
        save leaves them.)"""
        for name in _list(self.path, self.storage_options):
            if _RANK_FILE.fullmatch(name) and name not in named:
                _remove(join_path(self.path, name), self.storage_options)

    def _check_existing(self, name: str) -> None:
        path = join_path(self.path, name)
        if _exists(path, self.storage_options):
            if not self.overwrite:
                raise InvalidInputError(f"a checkpoint already exists at {self.path} and overwrite=False")
            _remove(path, self.storage_options)
