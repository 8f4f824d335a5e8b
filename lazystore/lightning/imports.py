"""The Lightning names this package uses, imported in one place: a missing
Lightning is one MissingDependencyError with the install hint, whichever
module is imported first, and the private names lazystore relies on are
listed here (each pinned by a test; lightning==2.6.6 in the test extra).
"""

from __future__ import annotations

from lazystore._core.distribution import install_hint
from lazystore.errors import MissingDependencyError

try:
    import lightning.pytorch as pl
    from lightning.fabric.plugins.io.checkpoint_io import CheckpointIO
    from lightning.fabric.utilities.cloud_io import get_filesystem
    from lightning.pytorch.callbacks import Callback

    # Private: what LightningModule.load_from_checkpoint does once the
    # checkpoint dict is read (tests/training/test_lightning_loading.py).
    from lightning.pytorch.core.saving import _load_state, load_hparams_from_tags_csv, load_hparams_from_yaml
    from lightning.pytorch.utilities.migration import migrate_checkpoint
    from lightning.pytorch.utilities.rank_zero import rank_zero_warn
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingDependencyError(
        f"lazystore.lightning needs PyTorch Lightning: {install_hint('lightning', 'lightning')}") from exc

__all__ = ["Callback", "CheckpointIO", "_load_state", "get_filesystem", "load_hparams_from_tags_csv",
           "load_hparams_from_yaml", "migrate_checkpoint", "pl", "rank_zero_warn"]
