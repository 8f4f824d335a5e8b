"""Training checkpoints: nested state (dicts, lists, tuples, torch and numpy
tensors, Python scalars) stored as flat tensors plus a JSON tree
(:mod:`~lazystore.views.tree`), and numbered checkpoints with retention
(:mod:`~lazystore.training.manager`)."""

from lazystore.training.manager import CheckpointManager

__all__ = ["CheckpointManager"]
