"""``load_from_checkpoint``: ``LightningModule.load_from_checkpoint`` for
the files LazyStoreCheckpointIO reads.

Lightning's classmethod reads the file with ``torch.load``, which cannot
read a lazystore file and offers no hook. This function reads it with the
plugin, then does what Lightning's ``_load_from_checkpoint`` does after its
``torch.load`` (lightning/pytorch/core/saving.py): migrate the checkpoint,
apply ``hparams_file`` and the keyword overrides, and hand the rest to
Lightning's own ``_load_state``, which instantiates the class from the
hyper-parameters (its allowlist of instantiators included), checks
``strict`` against ``strict_loading``, calls ``configure_model`` and
``on_load_checkpoint`` and loads the state. ``_load_state`` is private:
tests/training/test_lightning_loading.py pins what this relies on
(lightning==2.6.6 in the test extra).
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, cast

from lazystore.errors import InvalidInputError
from lazystore.lightning.imports import (
    _load_state,
    load_hparams_from_tags_csv,
    load_hparams_from_yaml,
    migrate_checkpoint,
    pl,
    rank_zero_warn,
)
from lazystore.lightning.plugin import LazyStoreCheckpointIO


def load_from_checkpoint(cls: type[pl.LightningModule] | type[pl.LightningDataModule],
                         checkpoint_path: str | os.PathLike[str] | BinaryIO, map_location: Any = None,
                         hparams_file: str | os.PathLike[str] | None = None, strict: bool | None = None,
                         weights_only: bool | None = None,
                         **kwargs: Any) -> pl.LightningModule | pl.LightningDataModule:
    """``cls.load_from_checkpoint(checkpoint_path, ...)`` for a checkpoint LazyStoreCheckpointIO reads.

    That is a lazystore file, or a torch ``.ckpt`` read without unpickling.
    The arguments are Lightning's. The model ends up on the device of the
    loaded weights, as with Lightning. Tensors are checked against the
    file's checksums, as ``ls.load`` does.

    Parameters
    ----------
    cls : type
        A LightningModule or LightningDataModule subclass.
    checkpoint_path : str or os.PathLike or file object
        The checkpoint.
    map_location : str or torch.device or callable or dict, optional
        None, a device string or a ``torch.device`` (a function or a dict
        loads onto the CPU); lazystore files record no device, so None
        means the CPU.
    hparams_file : str or os.PathLike, optional
        A .yaml or .csv file whose hyper-parameters replace the saved ones.
    strict : bool, optional
        ``load_state_dict``'s, which Lightning checks against the module's
        ``strict_loading``.
    weights_only : bool, optional
        Accepted and needs no effect: nothing is unpickled.
    **kwargs
        Override the saved hyper-parameters and reach ``__init__``.

    Returns
    -------
    lightning.pytorch.LightningModule or lightning.pytorch.LightningDataModule
        An instance of ``cls``, its state loaded.

    Raises
    ------
    InvalidInputError
        ``cls`` is not a LightningModule or LightningDataModule subclass.
    ChecksumError
        A tensor fails its checksums (the message names it).
    FormatError
        The file is damaged or not a checkpoint.
    ValueError
        ``hparams_file`` is neither .csv, .yml nor .yaml (Lightning's error).
    """
    if not (isinstance(cls, type) and issubclass(cls, (pl.LightningModule, pl.LightningDataModule))):
        raise InvalidInputError(f"load_from_checkpoint loads a LightningModule or LightningDataModule subclass, "
                                f"not {cls!r}")
    checkpoint = LazyStoreCheckpointIO().load_checkpoint(checkpoint_path, map_location=map_location)
    checkpoint, _ = migrate_checkpoint(checkpoint)
    if hparams_file is not None:
        checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY] = _hparams_from_file(hparams_file)
    checkpoint.setdefault(cls.CHECKPOINT_HYPER_PARAMS_KEY, {})
    checkpoint[cls.CHECKPOINT_HYPER_PARAMS_KEY].update(kwargs)
    if issubclass(cls, pl.LightningDataModule):
        return _load_state(cls, checkpoint, **kwargs)
    # A LightningModule subclass, from here on (the data module returned above).
    model = cast(pl.LightningModule, _load_state(cls, checkpoint, strict=strict, **kwargs))
    state_dict = checkpoint["state_dict"]
    if not state_dict:
        rank_zero_warn(f"The state dict in {checkpoint_path!r} contains no parameters.")
        return model
    device = next((t.device for t in state_dict.values() if hasattr(t, "device")), None)
    return model if device is None else model.to(device)


def _hparams_from_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Lightning's reading of ``hparams_file``, by its extension."""
    path = os.fspath(path)  # Lightning's readers take a str or a Path
    extension = path.split(".")[-1].lower()
    if extension == "csv":
        return load_hparams_from_tags_csv(path)
    if extension in ("yml", "yaml"):
        return load_hparams_from_yaml(path)
    raise ValueError(".csv, .yml or .yaml is required for `hparams_file`")
