"""Refusing, when ``fit`` sets up, what LazyStoreCheckpointIO cannot save.

Lightning gives a CheckpointIO no setup hook (its interface is save, load,
remove and teardown), and the strategy calls it only for those. What a
checkpoint will hold that is known before training is the hyper-parameters
(of the module and the datamodule), so they are checked in the ``setup``
hook of a Callback, which runs before the first step (before a resume is
loaded, too). The Callback reaches every Trainer through Lightning's
``lightning.pytorch.callbacks_factory`` entry point (pyproject.toml), so
the user writes nothing; it does nothing unless the Trainer's checkpoint
I/O is (or wraps) a LazyStoreCheckpointIO. Without the entry point (a
checkout that is not installed), the first save refuses, as ls.save
validates before writing.
"""

from __future__ import annotations

from lazystore.errors import InvalidInputError
from lazystore.lightning.imports import Callback
from lazystore.lightning.plugin import LazyStoreCheckpointIO

# AsyncCheckpointIO wraps a plugin in ``.checkpoint_io``; wrappers of wrappers are allowed this deep.
_MAX_WRAPPERS = 8


class LazyStoreSetupCheck(Callback):
    """Checks, when ``fit`` sets up, that LazyStoreCheckpointIO can save the
    module's and the datamodule's hyper-parameters (InvalidInputError
    naming the hyper-parameter and its type, before the first step)."""

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":  # only fit saves checkpoints
            return
        plugin = _lazystore_plugin(trainer.strategy.checkpoint_io)
        if plugin is None:
            return
        for owner in (pl_module, trainer.datamodule):
            if owner is not None:
                _check_hyper_parameters(plugin, owner)


def callbacks() -> list[Callback]:
    """Lightning's ``callbacks_factory`` entry point: called by every Trainer."""
    return [LazyStoreSetupCheck()]


def _lazystore_plugin(io):
    for _ in range(_MAX_WRAPPERS):
        if isinstance(io, LazyStoreCheckpointIO):
            return io
        io = getattr(io, "checkpoint_io", None)
    return None


def _check_hyper_parameters(plugin: LazyStoreCheckpointIO, owner) -> None:
    """What Lightning's ``dump_checkpoint`` writes for ``owner``'s
    hyper-parameters, checked by the plugin; the culprit named, with what to do."""
    state = _hyper_parameter_entries(owner)
    try:
        plugin.check(state)
    except InvalidInputError as exc:
        key = owner.CHECKPOINT_HYPER_PARAMS_KEY
        name, value = _culprit(plugin, key, state.get(key))
        which = f"hyper-parameter {name!r} (a {_type_name(value)})" if name is not None else "hyper-parameters"
        ignore = f"ignore=[{name!r}]" if name is not None else "ignore=[...]"
        raise type(exc)(
            f"LazyStoreCheckpointIO cannot save {type(owner).__name__}'s {which}, so fit stops before training: "
            f"{exc}. Paths and argparse.Namespace are saved too. Convert it to such values, or leave it out of the "
            f"checkpoint with self.save_hyperparameters({ignore})") from None


def _hyper_parameter_entries(owner) -> dict:
    """The checkpoint entries Lightning 2.x's ``dump_checkpoint`` writes for
    ``owner``'s hyper-parameters (lightning/pytorch/trainer/connectors/checkpoint_connector.py)."""
    if not owner.hparams:
        return {}
    state = {}
    if hasattr(owner, "_hparams_name"):
        state[owner.CHECKPOINT_HYPER_PARAMS_NAME] = owner._hparams_name
    if type(owner.hparams).__module__.split(".")[0] == "omegaconf":  # saved as the container, with its type
        state[owner.CHECKPOINT_HYPER_PARAMS_KEY] = owner.hparams
        state[owner.CHECKPOINT_HYPER_PARAMS_TYPE] = type(owner.hparams)
    else:
        state[owner.CHECKPOINT_HYPER_PARAMS_KEY] = dict(owner.hparams)
    return state


def _culprit(plugin, key: str, hparams) -> tuple[object, object]:
    """The first hyper-parameter the plugin cannot save, and its value."""
    if isinstance(hparams, dict):
        for name, value in hparams.items():
            try:
                plugin.check({key: {name: value}})
            except InvalidInputError:
                return name, value
    return None, hparams


def _type_name(value) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
