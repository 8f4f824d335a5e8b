"""Which format a file written to a path is in: its extension decides, for
``ls.save``, ``lazystore.torch.save_file`` and the command line alike.

- ``.safetensors``: a genuine safetensors file (any safetensors or Hugging
  Face reader loads it), lazystore's checksums in its metadata.
- ``.pt``, ``.pth``, ``.bin`` (torch's pickles) and ``.npz`` (numpy's zip):
  formats lazystore reads for conversion but does not write; a lazystore
  file under such a name would make ``torch.load`` or ``np.load`` fail on
  it, so writing to one is refused.
- anything else (``.lzy``, ``.ckpt``, no extension, a file object): a
  lazystore file.
"""

from __future__ import annotations

import os

EXTENSIONS = {
    ".safetensors": "safetensors",
    ".npz": "npz",
    ".pt": "torch",
    ".pth": "torch",
    ".bin": "torch",
}
# What the formats lazystore does not write are, for the error refusing them.
_READ_ONLY = {"torch": "a torch pickle (torch.load)", "npz": "a numpy .npz archive (np.load)"}


def format_of(path) -> str:
    """The format a file at ``path`` (a path, a URL, or a file object) is
    written in: "safetensors", "torch", "npz" or "lazystore"."""
    if not isinstance(path, (str, os.PathLike)):
        return "lazystore"
    return EXTENSIONS.get(os.path.splitext(os.fspath(path))[1].lower(), "lazystore")


def refusal(path, fmt: str) -> str | None:
    """Why nothing is written to ``path`` in format ``fmt``, or None when
    lazystore writes that format."""
    what = _READ_ONLY.get(fmt)
    if what is None:
        return None
    return (f"{os.fspath(path)}: this name says {what}, which lazystore does not write (a lazystore file "
            "under it would fail to load there); save to a .lzy name (lazystore) or a .safetensors one")
