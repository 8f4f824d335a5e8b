"""PyTorch Lightning's checkpoint I/O, in lazystore files.

>>> trainer = Trainer(plugins=[LazyStoreCheckpointIO()])                    # doctest: +SKIP
>>> trainer = Trainer(plugins=[LazyStoreCheckpointIO(blocking=False)])      # doctest: +SKIP
>>> trainer = Trainer(plugins=[AsyncCheckpointIO(LazyStoreCheckpointIO())])  # doctest: +SKIP
>>> model = load_from_checkpoint(MyModule, "epoch=3.ckpt")                  # doctest: +SKIP

- :mod:`~lazystore.lightning.plugin`: ``LazyStoreCheckpointIO``. Lightning's
  checkpoint dict (weights, optimizer and scheduler states, loop progress,
  callback states, hyper-parameters) is saved with :func:`lazystore.save`
  and loaded with :func:`lazystore.load`: no pickle, so loading never runs
  code. Torch ``.ckpt`` files Lightning wrote load too, never unpickled.
  ``blocking=False`` saves in the background; Lightning's
  ``AsyncCheckpointIO`` wrapper works too.
- :mod:`~lazystore.lightning.objects`: ``pathlib`` paths and
  ``argparse.Namespace`` saved as plain values, rebuilt on load.
- :mod:`~lazystore.lightning.torch_files`: torch ``.ckpt`` files read as
  ``torch.load(weights_only=True)`` reads them.
- :mod:`~lazystore.lightning.loading`: ``load_from_checkpoint(cls, path,
  ...)``, ``LightningModule.load_from_checkpoint`` for these files.
- :mod:`~lazystore.lightning.setup_check`: what the plugin cannot save is
  refused when ``fit`` sets up, before the first step.
"""

from lazystore.lightning.loading import load_from_checkpoint
from lazystore.lightning.plugin import LazyStoreCheckpointIO

__all__ = ["LazyStoreCheckpointIO", "load_from_checkpoint"]
