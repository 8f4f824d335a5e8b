"""LazyStoreReader: DCP's StorageReader over lazystore files (the layout is
described in :mod:`lazystore.dcp`)."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from lazystore._core import torch_arrays as torch_adapter
from lazystore.api import open as ls_open
from lazystore.dcp import metadata as metadata_json
from lazystore.dcp.metadata import DCP_KEY, LazyStorageInfo, item_key
from lazystore.dcp.storage import join_path, metadata_file, valid_checkpoint_id
from lazystore.errors import CheckpointNotFoundError, FormatError, InvalidInputError
from lazystore.sources import local_path

__all__ = ["LazyStoreReader", "check_rank_file"]


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


def _listed(names: list[str], most: int = 5) -> str:
    """A few names for a message, and how many more."""
    shown = ", ".join(repr(n) for n in names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


class LazyStoreReader(StorageReader):
    """Load DCP checkpoints written by :class:`LazyStoreWriter`, reading only the bytes each rank needs.

    Every tensor is checked against its checksums as it is read, as
    :func:`lazystore.load` checks.

    DCP's load planners deserialise a non-tensor ("bytes") item with
    ``torch.load(weights_only=False)``, which runs whatever code the bytes
    carry, and the checkpoint, not the caller, says which items are bytes.
    So the reader refuses every bytes item unless ``allow_pickle=True``
    (for checkpoints you trust), and refuses one whose destination in the
    state dict is a tensor whatever ``allow_pickle`` says (see
    :meth:`_check_bytes_items`).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint's folder or fsspec URL prefix.
    storage_options : Mapping of str to Any, optional
        The fsspec options of a URL.
    verify : bool, optional
        False skips the check of raw tensors of local files; compressed
        chunks and remote bytes are always checked.
    allow_pickle : bool, optional
        Hand bytes items to DCP's planner, which unpickles them: only for
        checkpoints you trust.
    """

    def __init__(self, path: str | os.PathLike[str], *, storage_options: Mapping[str, Any] | None = None,
                 verify: bool = True, allow_pickle: bool = False) -> None:
        super().__init__()
        self.path = path
        self.storage_options = dict(storage_options or {})
        self.verify = verify
        self.allow_pickle = bool(allow_pickle)
        self.storage_data: dict = {}
        self.save_id: str | None = None
        self.load_id = uuid.uuid4().hex
        self.rank = None

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        """Start a new load, with a new load id.

        Parameters
        ----------
        checkpoint_id : str or os.PathLike, optional
            The checkpoint to read from now on; None keeps ``path``.
        """
        self.storage_data = {}
        if checkpoint_id:
            self.path = checkpoint_id
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """DCP's metadata of the checkpoint, from ``metadata.lzy``.

        Parameters
        ----------
        *args
            Ignored.
        **kwargs
            ``rank``: read that rank's own metadata file (a save without
            collectives).

        Returns
        -------
        torch.distributed.checkpoint.metadata.Metadata
            The metadata, with this load's id.

        Raises
        ------
        CheckpointNotFoundError
            No metadata file: no complete lazystore checkpoint there (the
            message says so when the folder holds torch's own).
        FormatError
            The file holds no DCP metadata, or metadata that is malformed.
        """
        path = join_path(self.path, metadata_file(kwargs.get("rank")))
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

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Take the storage data of :meth:`read_metadata`'s result.

        Parameters
        ----------
        metadata : torch.distributed.checkpoint.metadata.Metadata
            What :meth:`read_metadata` returned.
        is_coordinator : bool
            Ignored: every rank reads alike.
        *args
            Ignored.
        **kwargs
            ``rank``, as DCP passes it.

        Raises
        ------
        FormatError
            The metadata has no storage data.
        """
        if metadata.storage_data is None:
            raise FormatError("DCP metadata has no storage data")
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank")

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """This rank's load plan, unchanged: a lazystore file needs no planning.

        Parameters
        ----------
        plan : torch.distributed.checkpoint.planner.LoadPlan
            This rank's plan.

        Returns
        -------
        torch.distributed.checkpoint.planner.LoadPlan
            ``plan``.
        """
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """The ranks' load plans, unchanged.

        Parameters
        ----------
        plans : list of torch.distributed.checkpoint.planner.LoadPlan
            Every rank's plan.

        Returns
        -------
        list of torch.distributed.checkpoint.planner.LoadPlan
            ``plans``.
        """
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read the plan's items, opening each rank file once and reading only what each item asks for.

        Bytes items are refused first (see the class), before any file is
        opened or any target written.

        Parameters
        ----------
        plan : torch.distributed.checkpoint.planner.LoadPlan
            This rank's plan.
        planner : torch.distributed.checkpoint.planner.LoadPlanner
            What receives each tensor and bytes item.

        Returns
        -------
        torch.futures.Future
            Done, holding None.

        Raises
        ------
        InvalidInputError
            The plan has bytes items and ``allow_pickle`` is False, or a
            target's shape is not what the plan reads.
        FormatError
            A bytes item whose destination is a tensor, a rank file of
            another save, or an item its file lacks or holds in another
            shape or dtype.
        ChecksumError
            Stored bytes fail their checksums.
        """
        self._check_bytes_items(plan, planner)  # before any file is opened or any target written
        per_file: dict[str, list] = {}
        for req in plan.items:
            info = self.storage_data.get(req.storage_index)
            if not isinstance(info, LazyStorageInfo):
                raise FormatError(f"no lazystore storage entry for {item_key(req.storage_index)!r}")
            per_file.setdefault(info.relative_path, []).append((req, info.key))
        for rel, reqs in per_file.items():
            path = join_path(self.path, rel)
            with ls_open(path, verify=self.verify, storage_options=self.storage_options or None) as ck:
                check_rank_file(ck, path, rel, self.save_id)
                for req, key in reqs:
                    self._read_one(ck, req, key, planner, path)
        fut: Future = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: object) -> bool:
        """Whether DCP's ``checkpoint_id`` can name a checkpoint to read.

        Parameters
        ----------
        checkpoint_id : object
            The folder or URL prefix DCP was given.

        Returns
        -------
        bool
            True for a non-empty str or path.
        """
        return valid_checkpoint_id(checkpoint_id)

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
