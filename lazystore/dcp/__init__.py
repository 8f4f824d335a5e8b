"""lazystore as a storage backend for :mod:`torch.distributed.checkpoint` (DCP).

>>> import torch.distributed.checkpoint as dcp                      # doctest: +SKIP
>>> from lazystore.dcp import LazyStoreWriter, LazyStoreReader
>>> dcp.save(state_dict, storage_writer=LazyStoreWriter("ckpt", compression="auto"))
>>> dcp.load(state_dict, storage_reader=LazyStoreReader("ckpt"))

A checkpoint is a folder (or an fsspec URL prefix) of lazystore files only:

- ``rank-00000.lzy``, ``rank-00001.lzy``, ...: each rank streams the items
  DCP plans for it into its own file, one tensor per item, named by
  :func:`~lazystore.dcp.metadata.item_key` (``fqn[offsets]`` for a tensor
  chunk, ``fqn`` for a bytes item, stored as a uint8 tensor).
- ``metadata.lzy``: written last by the coordinator, it holds no tensors,
  only DCP's ``Metadata`` as JSON in the reserved metadata member
  ``__lazystore_dcp__`` (see :mod:`lazystore.dcp.metadata`). Its presence
  marks a complete checkpoint.

Reading opens each rank file once (its index only) and reads just the part of
each saved chunk a ``ReadItem`` asks for, through ``get_slice``: a view of the
memory map for raw tensors, only the touched chunks decoded for compressed
ones, range requests for a URL.

This layer never unpickles anything. DCP itself serialises non-tensor items
(ints, dicts, ...) with ``torch.save`` into bytes; lazystore stores those bytes
as they are. On load, DCP's planner would ``torch.load(weights_only=False)``
them, so ``LazyStoreReader`` hands them over only with ``allow_pickle=True``,
and never for an item the caller's state dict holds as a tensor
(docs/distributed.md, "Non-tensor items and pickle").

:func:`consolidate` writes a whole DCP checkpoint, lazystore's or torch's
``FileSystemWriter``'s, as one lazystore file for inference, a band of rows
at a time (``lazystore convert DCP_FOLDER out.lzy``).
"""

from lazystore.dcp.consolidate import Consolidated, consolidate
from lazystore.dcp.reader import LazyStoreReader
from lazystore.dcp.storage import METADATA_FILE, LazyStorageInfo, LazyStoreWriter, rank_file

__all__ = ["METADATA_FILE", "Consolidated", "LazyStorageInfo", "LazyStoreReader", "LazyStoreWriter", "consolidate",
           "rank_file"]
