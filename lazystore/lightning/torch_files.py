"""Lightning's own checkpoints (torch.save zips), read without unpickling.

A project that switches to LazyStoreCheckpointIO mid-run resumes from the
``.ckpt`` files Lightning wrote before. They are read as
``torch.load(weights_only=True)`` reads them (:func:`lazystore.interop.archives.load_torch`):
tensors, containers and plain scalars, and here also ``pathlib`` paths and
``argparse.Namespace``, whose rebuilding calls no code the file chooses
(``Path(*parts)``; a namespace's attributes set from a dict of values the
same unpickler checked). Any other object in the pickle (a config class, a
function) is refused before anything runs, with what to do about it.
"""

from __future__ import annotations

from argparse import Namespace
from pathlib import PosixPath, PurePosixPath, PureWindowsPath, WindowsPath

from lazystore.errors import FormatError
from lazystore.interop import archives

# What Lightning projects keep in hyper-parameters, beyond torch's allowlist.
SAFE_CLASSES = (PosixPath, WindowsPath, PurePosixPath, PureWindowsPath, Namespace)

_ADVICE = ("LazyStoreCheckpointIO reads torch checkpoints as torch.load(weights_only=True) does (pathlib paths "
           "and argparse.Namespace allowed), so that a checkpoint cannot run code, and never unpickles more. "
           "If you trust this file, convert it once: ckpt = torch.load(path, weights_only=False); replace the "
           "objects named above with plain values (dicts, lists, str, numbers, paths, Namespace); "
           "LazyStoreCheckpointIO().save_checkpoint(ckpt, 'converted.ckpt'); and resume from 'converted.ckpt'")


def is_torch_file(path) -> bool:
    """Is ``path`` a local torch.save file? Told by its content (a zip with a
    ``data.pkl``, or a legacy pickle), whatever its extension; URLs and file
    objects are not (they are read as lazystore files)."""
    return archives.archive_format(path) == "torch"


def load(path, map_location=None) -> dict:
    """The checkpoint of a torch file, on the CPU unless ``map_location``
    (any of torch.load's forms) says otherwise."""
    try:
        return archives.load_torch(path, map_location="cpu" if map_location is None else map_location,
                                   safe_globals=SAFE_CLASSES)
    except FormatError as exc:
        raise FormatError(f"{exc}. {_ADVICE}") from None
