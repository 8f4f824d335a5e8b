"""LazyStoreWriter and LazyStoreReader: DCP's StorageWriter and StorageReader
over lazystore files (the layout is described in :mod:`lazystore.dcp`)."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import uuid
from collections.abc import Mapping

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import (
    StorageReader,
    StorageWriter,
    WriteResult,
)
from torch.futures import Future

from lazystore._core import torch_arrays as torch_adapter
from lazystore.api import open as ls_open
from lazystore.codecs import codec_for
from lazystore.dcp import metadata as metadata_json
from lazystore.dcp.metadata import DCP_KEY, LazyStorageInfo, item_key
from lazystore.errors import CheckpointNotFoundError, FormatError, InvalidInputError
from lazystore.sources import local_path
from lazystore.sources.fsspec import url_to_fs
from lazystore.writing.writer import Writer

METADATA_FILE = "metadata.lzy"
_RANK_FILE = re.compile(r"rank-\d{5,}\.lzy")
__all__ = ["METADATA_FILE", "LazyStorageInfo", "LazyStoreReader", "LazyStoreWriter", "rank_file"]


def rank_file(rank: int) -> str:
    """The file name of one rank's items."""
    return f"rank-{rank:05d}.lzy"


def check_rank_file(ck, path, rel: str, save_id: str | None) -> None:
    """Refuse a file that is not the rank file ``rel`` of the save ``save_id``
    (one left by another save, or copied in from one)."""
    tag = ck.system_metadata.get(DCP_KEY)
    if not isinstance(tag, dict) or tag.get("file") != rel:
        raise FormatError(f"{path} is not a rank file of a lazystore DCP checkpoint")
    if isinstance(save_id, str) and tag.get("save_id") != save_id:
        raise FormatError(f"{path} belongs to another save ({tag.get('save_id')!r}, "
                          f"the metadata names {save_id!r}): the checkpoint is mixed")


def _torch_checkpoint_hint(path) -> str:
    """What to do instead when ``path`` holds torch's own DCP checkpoint."""
    local = local_path(path)
    if local is None or not os.path.isfile(os.path.join(local, ".metadata")):
        return ""
    return ("; it holds a checkpoint of torch's FileSystemWriter (.metadata): load it with torch's reader "
            "(dcp.load(state_dict, checkpoint_id=path)), or make one lazystore file of it with "
            "lazystore.dcp.consolidate(path, 'model.lzy')")


def _metadata_file(rank: int | None) -> str:
    # use_collectives=False: each rank records its own metadata.
    return METADATA_FILE if rank is None else f"metadata-rank-{rank:05d}.lzy"


def _join(base, name: str):
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


def _listed(names: list[str], most: int = 5) -> str:
    """A few names for a message, and how many more."""
    shown = ", ".join(repr(n) for n in names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _checkpoint_id(path) -> str:
    return path if isinstance(path, str) else os.fspath(path)


def _valid_id(checkpoint_id) -> bool:
    return isinstance(checkpoint_id, (str, os.PathLike)) and bool(os.fspath(checkpoint_id))


@dataclasses.dataclass(frozen=True)
class _RankPlan:
    """The storage_data of a SavePlan: where this rank writes, and the save's id."""

    file: str
    save_id: str


class LazyStoreWriter(StorageWriter):
    """Save DCP checkpoints as lazystore files.

    ``path`` is a folder (created if missing) or an fsspec URL prefix
    (``s3://bucket/ckpt``, with ``storage_options``). ``compression``
    (None or ``"zstd"``), ``compression_level`` and ``chunk_bytes`` are
    :class:`lazystore.Writer`'s, applied to every rank file. ``overwrite=False``
    refuses a folder that already holds a checkpoint.
    """

    def __init__(self, path, *, compression=None, compression_level: int | None = None,
                 chunk_bytes: int | None = None, storage_options=None, overwrite: bool = True):
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

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id:
            self.path = checkpoint_id
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.use_collectives = kwargs.get("use_collectives", True)

    def storage_meta(self) -> StorageMeta | None:
        return StorageMeta(checkpoint_id=_checkpoint_id(self.path), save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        local = local_path(self.path)
        if local is not None:
            os.makedirs(local, exist_ok=True)
        if self.rank is not None and not self.use_collectives:
            self._check_existing(_metadata_file(self.rank))
            plan = dataclasses.replace(plan, storage_data=_RankPlan(rank_file(self.rank), self.save_id))
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        # The coordinator, before any rank writes: drop an older checkpoint's
        # metadata so a save that dies half-way leaves no checkpoint that
        # looks complete, then give each rank its file and the shared save id.
        self._check_existing(METADATA_FILE)
        return [plan if plan.storage_data is not None
                else dataclasses.replace(plan, storage_data=_RankPlan(rank_file(i), self.save_id))
                for i, plan in enumerate(plans)]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        rank_plan: _RankPlan = plan.storage_data
        self.save_id = rank_plan.save_id
        results = []
        options = {"compression": self.compression, "compression_level": self.compression_level,
                   "storage_options": self.storage_options or None}
        if self.chunk_bytes is not None:
            options["chunk_bytes"] = self.chunk_bytes
        with Writer(_join(self.path, rank_plan.file), **options) as w:
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
        storage = {}
        for wr_list in results:
            storage.update({wr.index: wr.storage_data for wr in wr_list})
        metadata.storage_data = storage
        metadata.storage_meta = self.storage_meta()
        if metadata.version is None:
            from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION

            metadata.version = CURRENT_DCP_VERSION
        doc = metadata_json.encode(metadata, self.save_id)
        name = _metadata_file(self.rank if not self.use_collectives and self.rank is not None else None)
        with Writer(_join(self.path, name), storage_options=self.storage_options or None) as w:
            w.system_metadata[DCP_KEY] = doc
        if name == METADATA_FILE:
            self._remove_unnamed_rank_files({info.relative_path for info in storage.values()})

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return _valid_id(checkpoint_id)

    # -- internals --------------------------------------------------------------

    def _remove_unnamed_rank_files(self, named: set[str]) -> None:
        """Rank files of an earlier save with more ranks: the new metadata,
        durable now, names none of them. (Without collectives each rank
        writes its own metadata and none knows the world size, so such a
        save leaves them.)"""
        for name in _list(self.path, self.storage_options):
            if _RANK_FILE.fullmatch(name) and name not in named:
                _remove(_join(self.path, name), self.storage_options)

    def _check_existing(self, name: str) -> None:
        path = _join(self.path, name)
        if _exists(path, self.storage_options):
            if not self.overwrite:
                raise InvalidInputError(f"a checkpoint already exists at {self.path} and overwrite=False")
            _remove(path, self.storage_options)


class LazyStoreReader(StorageReader):
    """Load DCP checkpoints written by :class:`LazyStoreWriter`, reading only
    the bytes each rank needs. Every tensor is checked against its checksums
    as it is read, as :func:`lazystore.load` checks (``verify=False`` skips
    the check of raw tensors of local files; compressed chunks and remote
    bytes are always checked).

    DCP's load planners deserialise a non-tensor ("bytes") item with
    ``torch.load(weights_only=False)``, which runs whatever code the bytes
    carry, and the checkpoint, not the caller, says which items are bytes.
    So the reader refuses every bytes item unless ``allow_pickle=True``
    (for checkpoints you trust), and refuses one whose destination in the
    state dict is a tensor whatever ``allow_pickle`` says (see
    :meth:`_check_bytes_items`)."""

    def __init__(self, path, *, storage_options=None, verify: bool = True, allow_pickle: bool = False):
        super().__init__()
        self.path = path
        self.storage_options = dict(storage_options or {})
        self.verify = verify
        self.allow_pickle = bool(allow_pickle)
        self.storage_data: dict = {}
        self.save_id: str | None = None
        self.load_id = uuid.uuid4().hex
        self.rank = None

    def reset(self, checkpoint_id=None) -> None:
        self.storage_data = {}
        if checkpoint_id:
            self.path = checkpoint_id
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args, **kwargs) -> Metadata:
        path = _join(self.path, _metadata_file(kwargs.get("rank")))
        try:
            ck = ls_open(path, storage_options=self.storage_options or None)
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"no lazystore DCP checkpoint at {self.path} ({path} is missing)"
                                          f"{_torch_checkpoint_hint(self.path)}") from None
        with ck:
            doc = ck.system_metadata.get(DCP_KEY)
        if doc is None:
            raise FormatError(f"{path} holds no DCP metadata")
        metadata, self.save_id = metadata_json.decode(doc)
        if metadata.storage_meta is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args, **kwargs) -> None:
        if metadata.storage_data is None:
            raise FormatError("DCP metadata has no storage data")
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        self._check_bytes_items(plan, planner)  # before any file is opened or any target written
        per_file: dict[str, list] = {}
        for req in plan.items:
            info = self.storage_data.get(req.storage_index)
            if not isinstance(info, LazyStorageInfo):
                raise FormatError(f"no lazystore storage entry for {item_key(req.storage_index)!r}")
            per_file.setdefault(info.relative_path, []).append((req, info.key))
        for rel, reqs in per_file.items():
            path = _join(self.path, rel)
            with ls_open(path, verify=self.verify, storage_options=self.storage_options or None) as ck:
                check_rank_file(ck, path, rel, self.save_id)
                for req, key in reqs:
                    self._read_one(ck, req, key, planner, path)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return _valid_id(checkpoint_id)

    # -- internals --------------------------------------------------------------

    def _check_bytes_items(self, plan: LoadPlan, planner: LoadPlanner) -> None:
        """Refuse the plan's bytes items before the planner can unpickle one.

        Every route by which DCP deserialises stored bytes (``load_bytes``
        of DefaultLoadPlanner and its subclasses, _EmptyStateDictLoadPlanner
        included) gets them from ``read_data``, so this check covers them
        all. A bytes item whose destination the planner's state dict holds
        as a tensor is a checkpoint lying about its type: a FormatError,
        whatever ``allow_pickle`` says. (A planner without a ``state_dict``
        mapping has no destination to look at; ``allow_pickle`` alone then
        decides.)"""
        names = [req.dest_index.fqn for req in plan.items if req.type == LoadItemType.BYTE_IO]
        if not names:
            return
        state = getattr(planner, "state_dict", None)
        if isinstance(state, Mapping):
            tensors = [n for n in names if isinstance(state.get(n), torch.Tensor)]
            if tensors:
                raise FormatError(
                    f"the DCP checkpoint at {self.path} marks {_listed(tensors)} as pickled (bytes) "
                    "items, but the state dict holds tensors there: refused, never unpickled "
                    "(the checkpoint was tampered with or does not match the state dict)")
        if not self.allow_pickle:
            raise InvalidInputError(
                f"the DCP checkpoint at {self.path} holds non-tensor items {_listed(names)}, which DCP's "
                "load planner unpickles (torch.load(weights_only=False)) and a tampered checkpoint can "
                "make run any code. Load them only from a checkpoint you trust, with "
                "LazyStoreReader(path, allow_pickle=True), or leave those keys out of the state dict "
                "you load")

    def _read_one(self, ck, req, key: str, planner: LoadPlanner, path) -> None:
        """Serve one read item; bytes items have passed :meth:`_check_bytes_items`."""
        if key not in ck:
            raise FormatError(f"{path} has no item {key!r} named by the DCP metadata")
        if req.type == LoadItemType.BYTE_IO:
            arr = ck[key]
            if arr.dtype != np.uint8 or arr.ndim != 1:
                raise FormatError(f"bytes item {key!r} of {path} is not a 1-d uint8 tensor")
            # DCP's planner deserialises these bytes (torch.load), allowed by the caller.
            planner.load_bytes(req, io.BytesIO(arr.tobytes()))
            return
        sl = ck.get_slice(key)
        offsets, lengths = list(req.storage_offsets), list(req.lengths)
        if len(offsets) != sl.ndim or any(o + n > s for o, n, s in zip(offsets, lengths, sl.shape)):
            raise FormatError(f"{key!r} of {path} has shape {sl.shape}; the plan reads {offsets}+{lengths}")
        part = sl[tuple(slice(o, o + n) for o, n in zip(offsets, lengths))]
        target = planner.resolve_tensor(req).detach()
        if list(target.shape) != lengths:
            raise InvalidInputError(f"{key!r}: the planner's target has shape {list(target.shape)}, "
                                    f"the plan reads {lengths}")
        stored = torch_adapter.torch_dtype_of(part.dtype)
        if stored is None:
            raise FormatError(f"{key!r} of {path} has dtype {part.dtype}, which torch cannot hold")
        if target.device.type == "cpu" and target.dtype == stored:
            # Straight from the map (or the decoded chunks) into the target: one copy.
            np.copyto(torch_adapter.to_numpy(target), part)
        else:  # another device or dtype: copy_ moves and casts, as FileSystemReader's does
            target.copy_(torch_adapter.from_numpy(np.array(part), {}))
        planner.commit_tensor(req, target)
