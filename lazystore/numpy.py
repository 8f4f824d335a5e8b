"""``safetensors.numpy``'s functions over lazystore files: ``save_file``,
``load_file``, ``save`` and ``load``, with the same names and parameters.

``from lazystore.numpy import save_file, load_file`` where the code had
``from safetensors.numpy import save_file, load_file``. Files are written
flat (one array per name) by :func:`lazystore.save`, so they take its
options (``compression="auto"``, ...); reading goes through
:class:`lazystore.safe_open`, as safetensors' own ``load_file`` does, so
it reads lazystore files, safetensors files and sharded folders.
docs/torch.md lists the differences from safetensors, one line each.

Nothing here imports torch.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from lazystore import api
from lazystore._core import tensor_names
from lazystore.api.types import Key
from lazystore.errors import InvalidInputError
from lazystore.torch.handle import safe_open

__all__ = ["load", "load_file", "save", "save_file"]


def save_file(tensor_dict: Mapping[str, np.ndarray], filename: str | os.PathLike[str],
              metadata: Mapping[str, Any] | None = None, **options: Any) -> None:
    """Save a dict of numpy arrays to ``filename``, atomically.

    Big-endian arrays are stored little-endian, as safetensors stores them;
    non-contiguous arrays are stored as their values.

    Parameters
    ----------
    tensor_dict : Mapping of str to numpy.ndarray
        The arrays, by name; every name a str, every value an array.
    filename : str or os.PathLike
        Where to write the lazystore file.
    metadata : Mapping of str to Any, optional
        Any JSON object (safetensors takes str to str; that is a special
        case).
    **options
        :func:`lazystore.save`'s options (``compression``,
        ``compression_level``, ``chunk_bytes``, ...).

    Raises
    ------
    InvalidInputError
        ``tensor_dict`` is not a Mapping, a name is not a str, or a value
        is not a numpy array; checked before a byte is written.
    """
    api.save(_checked(tensor_dict), filename, metadata=metadata, **options)


def save(tensor_dict: Mapping[str, np.ndarray], metadata: Mapping[str, Any] | None = None, **options: Any) -> bytes:
    """The bytes :func:`save_file` would write (a lazystore file).

    Parameters
    ----------
    tensor_dict : Mapping of str to numpy.ndarray
        The arrays, by name, as for :func:`save_file`.
    metadata : Mapping of str to Any, optional
        Any JSON object.
    **options
        :func:`lazystore.save`'s options (``compression``, ...).

    Returns
    -------
    bytes
        The whole lazystore file.

    Raises
    ------
    InvalidInputError
        ``tensor_dict`` is not a Mapping of str to numpy arrays.
    """
    buffer = io.BytesIO()
    api.save(_checked(tensor_dict), buffer, metadata=metadata, **options)
    return buffer.getvalue()


def load(data: bytes | bytearray | memoryview, *, verify: bool = True) -> dict[str, np.ndarray]:
    """The arrays of a checkpoint held in bytes.

    Parameters
    ----------
    data : bytes or bytearray or memoryview
        What :func:`save` returns, or a safetensors file's bytes.
    verify : bool, optional
        Check each array against its checksums (the default);
        ``verify=False`` skips raw arrays' check.

    Returns
    -------
    dict of str to numpy.ndarray
        Every array, writable and owning its memory, in the file's order.
    """
    with api.open_bytes(data) as ck:
        return ck.load(verify=verify)


def load_file(filename: str | os.PathLike[str], *, backend: str = "mmap", verify: bool = True,
              encryption_key: Key | None = None) -> dict[str, np.ndarray]:
    """Every array of ``filename``, in the file's order.

    As ``safe_open(filename, framework="np").get_tensors()`` gives them:
    writable; on a local file raw arrays are copy-on-write views of it
    (writing never changes the file).

    Parameters
    ----------
    filename : str or os.PathLike
        A lazystore file, a safetensors file or a sharded folder.
    backend : {"mmap", "pread"}, optional
        Accepted for safetensors' sake; lazystore picks its own I/O.
    verify : bool, optional
        Check each array against its checksums (the default).
    encryption_key : bytes or callable, optional
        Reads an encrypted file, as ``ls.open`` does
        (``save_file(..., encryption_key=...)`` writes one).

    Returns
    -------
    dict of str to numpy.ndarray
        Every array of the file, by name.
    """
    with safe_open(filename, framework="np", backend=backend, encryption_key=encryption_key) as f:
        return f.get_tensors(verify=verify)


def _checked(tensor_dict: object) -> dict[str, np.ndarray]:
    """``tensor_dict`` as a dict of str to numpy arrays, checked before a byte
    is written; big-endian arrays byteswapped to little-endian."""
    if not isinstance(tensor_dict, Mapping):
        raise InvalidInputError(f"expected a dict of str to numpy.ndarray, got {type(tensor_dict).__name__}")
    out = {}
    for name, a in tensor_dict.items():
        tensor_names.require_str(name, "array names")
        if not isinstance(a, np.ndarray):
            raise InvalidInputError(f"{name!r} is a {type(a).__qualname__}, not a numpy.ndarray")
        out[name] = a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a
    return out
