"""Converters between lazystore and other formats.

Every converter streams one tensor at a time, and a large tensor a block of
rows at a time (:func:`copy`), so memory stays bounded whatever the sizes:

- :func:`to_safetensors`: any checkpoint lazystore opens -> a safetensors
  file (uncompressed; lazystore's checksums and metadata kept in
  ``__metadata__``, see :mod:`lazystore.interop.safetensors`).
- :func:`from_safetensors`: a safetensors file -> lazystore. (Any view
  works: ``ls.open`` reads safetensors directly.)
- :func:`from_torch`: a torch zip (``.pt``/``.pth``/``.bin``) -> lazystore,
  only through ``torch.load(weights_only=True)``: nothing is ever unpickled
  otherwise, and a pickle that tries to run code fails with FormatError.
- :func:`from_npz`: an ``.npz`` -> lazystore, with ``allow_pickle=False``.

Every output is written atomically, like any lazystore save, and stands
alone: a delta file's tensors are written whole (:func:`output_codec`) and
its base reference is not carried over (:func:`carried_system_metadata`), so
the output reads without the input's base.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Protocol, cast

from lazystore._core.aead import ENCRYPTION_KEY
from lazystore._core.blocks import blocks
from lazystore._native.base_ref import BASE_KEY
from lazystore._native.chunk_digests import DIGEST_KEY
from lazystore.errors import ChecksumError, VerificationUnavailableError
from lazystore.interop import archives
from lazystore.interop.folders import open_path
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.views import tree
from lazystore.views.base import TensorInfo, ViewBase
from lazystore.writing.interface import TensorWriter
from lazystore.writing.writer import Writer

# What a converter reads from or writes to: a local path or an fsspec URL.
Location = str | os.PathLike[str]


class CopySource(Protocol):
    """What :func:`copy` reads: a view, or anything with a view's reads.

    The command line's tensors gathered from several files are one.
    """

    def __iter__(self) -> Iterator[str]: ...

    def __getitem__(self, name: str) -> Any: ...

    def info(self, name: str) -> TensorInfo: ...

    def get_slice(self, name: str) -> Any: ...

# Tensors larger than this are copied a block at a time.
COPY_BLOCK_BYTES = 16 << 20

# Reserved members that say how the input is stored, not what it holds: a
# copy stores its tensors its own way, so it never carries them (its writer
# records its own chunk digests, if any: see :func:`digest_of`).
STORAGE_KEYS = frozenset({BASE_KEY, DIGEST_KEY, ENCRYPTION_KEY})

# What a tensor whose own codec means nothing outside its file is written
# with when no compression is asked for: a delta tensor (codec 2 or 3) is only a
# difference from its base, and zstd keeps the copy about as compact (the
# writer still stores it raw when zstd would save less than 1%); a sealed one
# (codec 128, 129 or 132) is written as its inner codec, sealed again if the
# copy's writer encrypts.
STANDALONE_CODECS = {"delta": "zstd", "sealed": None, "sealed+zstd": "zstd", "sealed+huffman": "huffman"}


def carried_system_metadata(view: ViewBase) -> dict[str, Any]:
    """The reserved metadata a copy of ``view`` carries.

    All of it (the structure of nested training state, ...) but
    :data:`STORAGE_KEYS`. A delta file's ``__lazystore_base__`` in
    particular: the copy holds every tensor whole, and docs/format.md §9.3
    allows the member only in a file with delta tensors.

    Parameters
    ----------
    view : ViewBase
        The checkpoint copied.

    Returns
    -------
    dict
        The reserved members the copy is written with.
    """
    return {k: v for k, v in view.system_metadata.items() if k not in STORAGE_KEYS}


def digest_of(view: ViewBase) -> str | None:
    """The algorithm of a checkpoint's chunk digests (format 1.4).

    A sharded folder's is its first shard's that has digests (a folder saved
    with ``digest=`` has them in every shard).

    Parameters
    ----------
    view : ViewBase
        The checkpoint: a file's view or a sharded folder's.

    Returns
    -------
    str or None
        ``"blake3"``, ``"sha256"``, or None for a checkpoint without them.
    """
    for part in getattr(view, "shards", [view]):
        member = part.system_metadata.get(DIGEST_KEY)
        if isinstance(member, dict) and isinstance(member.get("algorithm"), str):
            return member["algorithm"]
    return None


def carried_metadata(view: ViewBase) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata and reserved metadata a copy of ``view`` is written with.

    A state_dict an older version saved as a tree around a flat dict
    becomes the flat checkpoint it holds (``tree.looked_through``), as
    ``ls.save`` writes it now.

    Parameters
    ----------
    view : ViewBase
        The checkpoint copied.

    Returns
    -------
    metadata : dict
        The user's metadata.
    system_metadata : dict
        The reserved members (see :func:`carried_system_metadata`).
    """
    return tree.looked_through(view.metadata, carried_system_metadata(view))


def output_codec(compression: str | None, info: TensorInfo) -> str | None:
    """The codec a copy writes a tensor with.

    Parameters
    ----------
    compression : str or None
        The copy's ``compression`` ("auto", "zstd", "huffman", "none"), or None to keep each
        tensor's own.
    info : TensorInfo
        The tensor's info in the checkpoint copied.

    Returns
    -------
    str or None
        ``compression`` when given, else the tensor's own codec, as a
        standalone file can hold it (:data:`STANDALONE_CODECS`).
    """
    if compression is not None:
        return compression
    own = info.compression
    return own if own is None else STANDALONE_CODECS.get(own, own)


def copy(view: CopySource, writer: TensorWriter, *, compression: str | None = None, names: Iterable[str] | None = None,
         reads_checked: bool = False) -> None:
    """Stream tensors of ``view`` into ``writer`` one at a time.

    A tensor larger than ``COPY_BLOCK_BYTES`` is read and written a block
    of rows at a time (through ``get_slice`` and ``add_pieces``), so memory
    stays bounded even for a tensor larger than memory, provided the view
    does not keep what it reads resident (open local files with
    ``mmap=False``, as the converters and the command line do).

    ``compression`` None keeps each tensor's own codec (a delta tensor's
    becomes zstd: :func:`output_codec`); "auto", "zstd", "huffman" or
    "none" re-encodes every tensor (safetensors outputs ignore it). ``names`` picks
    the tensors and their order (default: all of ``view``'s, in its order).
    It is consumed one name per tensor, after the previous tensor is
    written, so an iterator that counts what it yields reports progress:
    the command line passes its progress bar. ``view`` needs ``info(name)``,
    ``view[name]`` and ``get_slice(name)`` (and iteration, without ``names``).

    A copy never turns unchecked bytes into a file with fresh checksums:
    unless its reads are checked, each tensor is verified
    (``view.verify([name])``, which covers a delta tensor's bases too)
    before it is read. A view that records no checksums (a plain
    safetensors file, a torch zip, an ``.npz``) has nothing to check against
    and is copied as read.

    Parameters
    ----------
    view : ViewBase or CopySource
        The checkpoint copied: it needs ``info(name)``, ``view[name]`` and
        ``get_slice(name)`` (and iteration, without ``names``).
    writer : TensorWriter
        Where the tensors go.
    compression : str or None, optional
        None keeps each tensor's own codec (a delta tensor's becomes zstd:
        :func:`output_codec`); "auto", "zstd", "huffman" or "none"
        re-encodes every tensor (safetensors outputs ignore it).
    names : iterable of str, optional
        The tensors and their order (default: all of ``view``'s, in its
        order). It is consumed one name per tensor, after the previous
        tensor is written, so an iterator that counts what it yields
        reports progress: the command line passes its progress bar.
    reads_checked : bool, optional
        ``view``'s reads check every byte they return (a view opened with
        ``verify=True``: raw chunks are then checked on access, compressed
        ones always are).

    Raises
    ------
    ChecksumError
        A tensor is damaged (the message names it); nothing of it is copied.
    TensorNotFoundError
        A name of ``names`` is not in ``view``.
    """
    for name in view if names is None else names:
        if not reads_checked:
            _check(view, name)
        info = view.info(name)
        codec = output_codec(compression, info)
        if info.nbytes <= COPY_BLOCK_BYTES:
            writer.add(name, view[name], compression=codec)
            continue
        part = view.get_slice(name)
        pieces = (part[index] for index in blocks(info.shape, info.dtype.itemsize, COPY_BLOCK_BYTES))
        writer.add_pieces(name, pieces, dtype=info.dtype, shape=info.shape, compression=codec)


def _check(view: Any, name: str) -> None:
    """ChecksumError unless tensor ``name`` of ``view`` verifies (or ``view``
    records no checksums: nothing to check it against)."""
    try:
        damaged = view.verify([name])
    except VerificationUnavailableError:
        return
    if damaged:
        raise ChecksumError(f"{view.name}: tensor {name!r} fails its checksum (verify()); not copied")


def _open(src: Location | ViewBase) -> tuple[ViewBase, bool, bool]:
    """``src``'s view, whether the converter owns it (opened it from a path
    or URL), and whether its reads are checked: a view the caller opened
    may not verify on access, so :func:`copy` verifies its tensors first."""
    if hasattr(src, "info"):  # an open view
        return cast(ViewBase, src), False, False
    # Unmapped: a converter reads each byte once, and a mapping would keep
    # every page it read resident, however large the checkpoint.
    return open_verified(src, mmap=False), True, True


def open_verified(path: Location, *, mmap: bool = True, encryption_key: Any = None) -> ViewBase:
    """``ls.open(path, verify=True)``: every read checked against what the file records.

    For a reader that must not pass on unchecked bytes (the converters,
    ``lazystore convert``, ``merge`` and ``diff``). A file that records no
    checksums (a plain safetensors file), which ``ls.open(verify=True)``
    refuses, opens as it is: there is nothing to check its reads against,
    and it is read as it is.

    Parameters
    ----------
    path : str or os.PathLike
        A checkpoint file or folder: a local path or an fsspec URL.
    mmap : bool, optional
        Map a local file (``False``: read it with ``pread``, keeping no page
        resident).
    encryption_key : optional
        The key of an encrypted file, as ``ls.open`` takes it.

    Returns
    -------
    ViewBase
        The open view.
    """
    try:
        return open_path(path, verify=True, mmap=mmap, encryption_key=encryption_key)
    except VerificationUnavailableError:
        return open_path(path, mmap=mmap, encryption_key=encryption_key)


def to_safetensors(src: Location | ViewBase, dst: Location, *,
                   storage_options: Mapping[str, Any] | None = None) -> None:
    """Write a checkpoint as a safetensors file.

    Parameters
    ----------
    src : str, os.PathLike or ViewBase
        A path, URL or open view, any format lazystore reads.
    dst : str or os.PathLike
        The safetensors file written, atomically.
    storage_options : Mapping, optional
        Options of ``dst``'s fsspec filesystem, for a URL.

    Raises
    ------
    ChecksumError
        A tensor of ``src`` is damaged; nothing is written.
    """
    view, owned, checked = _open(src)
    try:
        metadata, system = carried_metadata(view)
        with SafetensorsWriter(dst, metadata=metadata, storage_options=storage_options) as w:
            w.system_metadata.update(system)
            copy(view, w, reads_checked=checked)
    finally:
        if owned:
            view.close()


def to_lazystore(src: Location | ViewBase, dst: Location | IO[bytes], *, compression: str | None = None,
                 compression_level: int | None = None, **writer_options: Any) -> None:
    """Write a checkpoint as a lazystore file; a delta file becomes a standalone file.

    Parameters
    ----------
    src : str, os.PathLike or ViewBase
        A path, URL or open view, any format lazystore reads.
    dst : str, os.PathLike or binary file object
        The lazystore file written, atomically.
    compression : str or None, optional
        None keeps each tensor's codec (see :func:`copy`); "auto", "zstd",
        "huffman" or "none" re-encodes every tensor.
    compression_level : int, optional
        The zstd level.
    **writer_options
        :class:`~lazystore.Writer`'s other keywords (``chunk_bytes``,
        ``alignment``, ``digest``, ``encryption_key``, ...).

    Raises
    ------
    ChecksumError
        A tensor of ``src`` is damaged; nothing is written.
    """
    view, owned, checked = _open(src)
    try:
        metadata, system = carried_metadata(view)
        with Writer(dst, compression=compression, compression_level=compression_level,
                    metadata=metadata, **writer_options) as w:
            w.system_metadata.update(system)
            copy(view, w, compression=compression, reads_checked=checked)
    finally:
        if owned:
            view.close()


def from_safetensors(src: Location | ViewBase, dst: Location | IO[bytes], **options: Any) -> None:
    """Convert a safetensors file to a lazystore file.

    Parameters
    ----------
    src : str, os.PathLike or ViewBase
        The safetensors file (any view works: ``ls.open`` reads safetensors
        directly).
    dst : str, os.PathLike or binary file object
        The lazystore file written.
    **options
        As :func:`to_lazystore` takes them.
    """
    to_lazystore(src, dst, **options)


def from_torch(path: Location, dst: Location | IO[bytes], **options: Any) -> None:
    """Convert a torch zip file to a lazystore file, through ``torch.load(weights_only=True)`` only.

    Loaded with ``mmap=True``; nothing is ever unpickled otherwise. Nested
    state keeps its structure, so ``ls.load(dst)`` returns what
    ``torch.load`` did (tensors as torch tensors).

    Parameters
    ----------
    path : str or os.PathLike
        The torch zip (``.pt``/``.pth``/``.bin``).
    dst : str, os.PathLike or binary file object
        The lazystore file written.
    **options
        As :func:`to_lazystore` takes them.

    Raises
    ------
    FormatError
        A pickle that tries to run code, or a file that is not a torch zip.
    """
    with archives.open_torch(path) as view:
        to_lazystore(view, dst, **options)


def from_npz(path: Location, dst: Location | IO[bytes], **options: Any) -> None:
    """Convert an ``.npz`` to a lazystore file, one array at a time, never unpickling.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    dst : str, os.PathLike or binary file object
        The lazystore file written.
    **options
        As :func:`to_lazystore` takes them.

    Raises
    ------
    FormatError
        The file is not an ``.npz``, or holds an array that needs pickling.
    """
    with archives.open_npz(path) as view:
        to_lazystore(view, dst, **options)


__all__ = ["carried_metadata", "carried_system_metadata", "copy", "digest_of", "from_npz", "from_safetensors",
           "from_torch", "open_verified", "output_codec", "to_lazystore", "to_safetensors"]
