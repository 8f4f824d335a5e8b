"""``safetensors.torch``'s file functions over lazystore files: ``save_file``,
``load_file``, ``save`` and ``load``, with the same names and parameters.

Files are written flat (one tensor per name, no nested structure), so
``ls.open`` and every other lazystore reader see plain tensors; tensors that
are one tensor under several names are stored once (:mod:`lazystore._core.ties`).
Reading goes through the public view API only, so it takes whatever
``ls.open`` takes: lazystore files, safetensors files, sharded folders.
"""

from __future__ import annotations

import inspect
import io
import os
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from lazystore import api
from lazystore._core import arguments, tensor_names, ties, torch_arrays
from lazystore._core.torch_reads import tensors_of
from lazystore.api import open as open_checkpoint
from lazystore.api import open_bytes
from lazystore.errors import InvalidInputError
from lazystore.signing.anchor import refuse_unchecked
from lazystore.writing.writer import Writer

if TYPE_CHECKING:
    import torch

# safetensors' own I/O strategies; lazystore chooses its own (a map of a
# local file, range requests for a URL), so either is accepted and means that.
BACKENDS = ("mmap", "pread")
# Why torch is needed, for the error when it is not installed.
NEEDS_TORCH = "lazystore.torch reads and writes PyTorch tensors"
# What ``**options`` may hold: the Writer's own keywords.
OPTIONS = tuple(p for p in inspect.signature(Writer).parameters if p not in ("path", "metadata", "_salt"))


def save_file(tensors: dict[str, torch.Tensor], filename: str | os.PathLike[str] | IO[bytes],
              metadata: Mapping[str, Any] | None = None, **options: Any) -> None:
    """Save a dict of torch tensors to ``filename``, atomically.

    Unlike safetensors, non-contiguous tensors are saved (as their values),
    and tensors that are one tensor under several names (a module registered
    twice, tied weights) are stored once and come back tied from
    :func:`load_file`.

    Parameters
    ----------
    tensors : dict of str to torch.Tensor
        The tensors, by name: dense, of a storable dtype, not on the meta
        device.
    filename : str, os.PathLike or binary file object
        Where to write: a local path, an fsspec URL, or a file object.
    metadata : Mapping, optional
        Any JSON object (safetensors takes str to str; that is a special
        case).
    **options
        lazystore's writer options: ``compression`` ("auto", "zstd", "huffman" or None),
        ``compression_level``, ``chunk_bytes``, ``alignment``,
        ``storage_options``, ``digest`` ("blake3" or "sha256": chunk
        digests, checked by verified loads), ``encryption_key`` (see
        ``ls.save``).

    Raises
    ------
    InvalidInputError
        ``tensors`` is not a dict of str to torch.Tensor, a tensor cannot be
        stored, an option is unknown, or ``filename`` is a folder.
    MissingDependencyError
        torch is not installed.
    """
    checked(tensors)
    write(tensors, filename, metadata, options)


def save(tensors: dict[str, torch.Tensor], metadata: Mapping[str, Any] | None = None, **options: Any) -> bytes:
    """The bytes :func:`save_file` would write (a lazystore file).

    Parameters
    ----------
    tensors : dict of str to torch.Tensor
        The tensors, by name, as :func:`save_file` takes them.
    metadata : Mapping, optional
        Any JSON object.
    **options
        :func:`save_file`'s writer options.

    Returns
    -------
    bytes
        The whole file.

    Raises
    ------
    InvalidInputError
        As :func:`save_file` raises it.
    """
    buffer = io.BytesIO()  # ls.save writes a file object as lazystore.numpy.save does
    save_file(tensors, buffer, metadata, **options)
    return buffer.getvalue()


def load_file(filename: str | os.PathLike[str], device: str | int | torch.device = "cpu",
              keys: str | Sequence[str] | None = None, *, backend: str = "mmap", verify: bool = True,
              encryption_key: Any = None, public_key: Any = None, signature: str | os.PathLike[str] | None = None,
              index_sha256: str | None = None) -> dict[str, torch.Tensor]:
    """Load a checkpoint's tensors as torch tensors on a device.

    On the CPU, raw tensors of a local file are zero-copy, writable,
    copy-on-write views of it: writing to one never changes the file. Names
    saved as one tensor come back as one tensor object.

    Parameters
    ----------
    filename : str or os.PathLike
        A local path or an fsspec URL: anything ``ls.open`` opens.
    device : str, int or torch.device, optional
        Where the tensors go: "cpu", "cuda:0", an int for a CUDA index,
        "meta", a torch.device.
    keys : str or sequence of str, optional
        Which tensors: a glob pattern (str) or a list of names; only their
        bytes are read. ``[]`` gives ``{}``.
    backend : str, optional
        safetensors' I/O strategy, "mmap" or "pread": accepted, and
        lazystore chooses its own.
    verify : bool, optional
        Check every tensor against its checksums before it is returned;
        ``False`` skips the check of raw tensors, as ``ls.load`` does.
    encryption_key : optional
        The key of an encrypted file, as ``ls.open`` takes it.
    public_key : optional
        Check the checkpoint's signature with this key, as ``ls.open`` does
        (see docs/signing.md).
    signature : str or os.PathLike, optional
        The signature ``public_key`` checks (default ``FILE.sig``).
    index_sha256 : str, optional
        A pinned SHA-256 of the file's index, as ``ls.open`` takes it.

    Returns
    -------
    dict of str to torch.Tensor
        The tensors, by name.

    Raises
    ------
    TensorNotFoundError
        A name in ``keys`` is not in the file, or a glob matches nothing.
    ChecksumError
        A tensor is damaged (the message names it).
    InvalidInputError
        An unknown ``backend`` or device, or ``verify=False`` with a
        signature or a pinned index.
    FileNotFoundError
        No file at ``filename``.
    """
    dev = _device(device, backend)
    refuse_unchecked(verify, public_key, index_sha256)
    with opened(filename, encryption_key=encryption_key, public_key=public_key, signature=signature,
                index_sha256=index_sha256) as ck:
        return tensors_of(ck, keys, dev, verify=verify)


def load(data: bytes, *, verify: bool = True) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint held in bytes, as CPU tensors owning their memory.

    Parameters
    ----------
    data : bytes
        What :func:`save` returns, or a safetensors file's bytes.
    verify : bool, optional
        Check the tensors as :func:`load_file` checks them.

    Returns
    -------
    dict of str to torch.Tensor
        The tensors, by name.

    Raises
    ------
    ChecksumError
        A tensor is damaged.
    FormatError
        ``data`` is not a checkpoint.
    MissingDependencyError
        torch is not installed.
    """
    torch_arrays.require(NEEDS_TORCH)
    with open_bytes(data) as ck:
        return tensors_of(ck, None, None, verify=verify)


# -- shared with models.py and the safe_open handle ---------------------------------


def opened(filename, **keys):
    """``ls.open(filename, **keys)`` (``keys``: its ``encryption_key`` and
    signature keywords); a missing file raises FileNotFoundError worded as
    safetensors words it (``No such file or directory: <filename>``)."""
    try:
        return open_checkpoint(filename, **keys)
    except FileNotFoundError:
        name = os.fspath(filename) if isinstance(filename, (str, os.PathLike)) else filename
        # No errno nor filename: with them, str() would be Python's wording.
        raise FileNotFoundError(f"No such file or directory: {name}") from None


def checked(tensors) -> dict[str, str]:
    """Check that ``tensors`` can be saved, before a byte is written; the
    aliases among them (``{alias: stored name}``)."""
    torch = torch_arrays.require(NEEDS_TORCH)
    if not isinstance(tensors, Mapping):
        raise InvalidInputError(f"expected a dict of str to torch.Tensor, got {type(tensors).__name__}")
    for name, t in tensors.items():
        tensor_names.require_str(name)
        if not isinstance(t, torch.Tensor):
            raise InvalidInputError(f"{name!r} is a {type(t).__qualname__}, not a torch.Tensor")
        torch_arrays.describe(t, repr(name))  # dense, a storable dtype, not on the meta device
    return ties.find_aliases(tensors)


def write(tensors: Mapping, filename, metadata, options: dict) -> None:
    """Write checked ``tensors`` as ``ls.save`` writes a flat dict of torch
    tensors (the format its extension names; tied tensors once in a
    lazystore file), as plain tensors: a Parameter's flags are not kept."""
    arguments.known_options(options, OPTIONS, others=("metadata",))
    if isinstance(filename, (str, os.PathLike)) and os.path.isdir(filename):
        raise InvalidInputError(f"{os.fspath(filename)!r} is a folder: save_file writes one file")
    api.save({name: t.detach() for name, t in tensors.items()}, filename, metadata=metadata, **options)


def _device(device, backend: str):
    """``device`` as a torch.device (checked to exist here), after checking
    ``backend`` is one of safetensors'."""
    torch_arrays.require(NEEDS_TORCH)
    if backend not in BACKENDS:
        raise InvalidInputError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    return torch_arrays.device(device, "device")
