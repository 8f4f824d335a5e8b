"""Lazy views of checkpoints: Mappings of tensor names to arrays.

Every view implements the contract in :mod:`lazystore.views.base`, whatever
it reads from: one file (:mod:`~lazystore.views.checkpoint`, lazystore or
safetensors, local or remote), a folder of shards
(:mod:`~lazystore.views.sharded`), or an archive's arrays
(:mod:`~lazystore.views.arrays`). :mod:`~lazystore.views.chunk_reader`
reads, checks and decodes a file's chunks.
"""

from lazystore.views.arrays import ArraysView
from lazystore.views.base import ViewBase
from lazystore.views.checkpoint import CheckpointView, TensorSlice
from lazystore.views.sharded import ShardedView

__all__ = ["ArraysView", "CheckpointView", "ShardedView", "TensorSlice", "ViewBase"]
