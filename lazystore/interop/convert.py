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

from collections.abc import Iterable, Mapping

from lazystore._core.aead import ENCRYPTION_KEY
from lazystore._core.blocks import blocks
from lazystore._native.base_ref import BASE_KEY
from lazystore._native.chunk_digests import DIGEST_KEY
from lazystore.errors import ChecksumError, VerificationUnavailableError
from lazystore.interop import archives
from lazystore.interop.folders import open_path
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.views import tree
from lazystore.writing.writer import Writer

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
# (codec 128 or 129) is written as its inner codec, sealed again if the
# copy's writer encrypts.
STANDALONE_CODECS = {"delta": "zstd", "sealed": None, "sealed+zstd": "zstd"}


def carried_system_metadata(view) -> dict:
    """The reserved metadata a copy of ``view`` carries: all of it (the
    structure of nested training state, ...) but :data:`STORAGE_KEYS`. A
    delta file's ``__lazystore_base__`` in particular: the copy holds every
    tensor whole, and docs/format.md §9.3 allows the member only in a file
    with delta tensors."""
    return {k: v for k, v in view.system_metadata.items() if k not in STORAGE_KEYS}


def digest_of(view) -> str | None:
    """The algorithm of ``view``'s chunk digests (format 1.4): ``"blake3"``,
    ``"sha256"``, or None for a checkpoint without them. A sharded folder's
    is its first shard's that has digests (a folder saved with ``digest=``
    has them in every shard)."""
    for part in getattr(view, "shards", [view]):
        member = part.system_metadata.get(DIGEST_KEY)
        if isinstance(member, dict) and isinstance(member.get("algorithm"), str):
            return member["algorithm"]
    return None


def carried_metadata(view) -> tuple[dict, dict]:
    """``(metadata, system_metadata)`` a copy of ``view`` is written with
    (the latter :func:`carried_system_metadata`): a state_dict an older
    version saved as a tree around a flat dict becomes the flat checkpoint
    it holds (``tree.looked_through``), as ``ls.save`` writes it now."""
    return tree.looked_through(view.metadata, carried_system_metadata(view))


def output_codec(compression, info):
    """The codec a copy writes tensor ``info`` with: ``compression`` when
    given ("zstd", "none"), else the tensor's own, as a standalone file can
    hold it (:data:`STANDALONE_CODECS`)."""
    if compression is not None:
        return compression
    return STANDALONE_CODECS.get(info.compression, info.compression)


def copy(view, writer, *, compression=None, names: Iterable[str] | None = None, reads_checked: bool = False) -> None:
    """Stream tensors of ``view`` into ``writer`` one at a time.

    A tensor larger than ``COPY_BLOCK_BYTES`` is read and written a block
    of rows at a time (through ``get_slice`` and ``add_pieces``), so memory
    stays bounded even for a tensor larger than memory, provided the view
    does not keep what it reads resident (open local files with
    ``mmap=False``, as the converters and the command line do).

    ``compression`` None keeps each tensor's own codec (a delta tensor's
    becomes zstd: :func:`output_codec`); "zstd" or "none" re-encodes every
    tensor (safetensors outputs ignore it). ``names`` picks
    the tensors and their order (default: all of ``view``'s, in its order).
    It is consumed one name per tensor, after the previous tensor is
    written, so an iterator that counts what it yields reports progress:
    the command line passes its progress bar. ``view`` needs ``info(name)``,
    ``view[name]`` and ``get_slice(name)`` (and iteration, without ``names``).

    A copy never turns unchecked bytes into a file with fresh checksums.
    ``reads_checked`` says that ``view``'s reads check every byte they
    return (a view opened with ``verify=True``: raw chunks are then checked
    on access, compressed ones always are); otherwise each tensor is
    verified (``view.verify([name])``, which covers a delta tensor's bases
    too) before it is read, and a damaged one raises ChecksumError naming
    it. A view that records no checksums (a plain safetensors file, a torch
    zip, an ``.npz``) has nothing to check against and is copied as read."""
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


def _check(view, name: str) -> None:
    """ChecksumError unless tensor ``name`` of ``view`` verifies (or ``view``
    records no checksums: nothing to check it against)."""
    try:
        damaged = view.verify([name])
    except VerificationUnavailableError:
        return
    if damaged:
        raise ChecksumError(f"{view.name}: tensor {name!r} fails its checksum (verify()); not copied")


def _open(src):
    """``src``'s view, whether the converter owns it (opened it from a path
    or URL), and whether its reads are checked: a view the caller opened
    may not verify on access, so :func:`copy` verifies its tensors first."""
    if hasattr(src, "info"):
        return src, False, False
    # Unmapped: a converter reads each byte once, and a mapping would keep
    # every page it read resident, however large the checkpoint.
    return open_verified(src, mmap=False), True, True


def open_verified(path, *, mmap: bool = True, encryption_key=None):
    """``ls.open(path, verify=True)``, every read checked against what the
    file records, for a reader that must not pass on unchecked bytes (the
    converters, ``lazystore convert``, ``merge`` and ``diff``). A file that
    records no checksums (a plain safetensors file), which
    ``ls.open(verify=True)`` refuses, opens as it is: there is nothing to
    check its reads against, and it is read as it is."""
    try:
        return open_path(path, verify=True, mmap=mmap, encryption_key=encryption_key)
    except VerificationUnavailableError:
        return open_path(path, mmap=mmap, encryption_key=encryption_key)


def to_safetensors(src, dst, *, storage_options: Mapping | None = None) -> None:
    """Write ``src`` (a path, URL or open view) as a safetensors file."""
    view, owned, checked = _open(src)
    try:
        metadata, system = carried_metadata(view)
        with SafetensorsWriter(dst, metadata=metadata, storage_options=storage_options) as w:
            w.system_metadata.update(system)
            copy(view, w, reads_checked=checked)
    finally:
        if owned:
            view.close()


def to_lazystore(src, dst, *, compression=None, compression_level: int | None = None, **writer_options) -> None:
    """Write ``src`` (a path, URL or open view, any format) as a lazystore
    file; ``compression`` None keeps each tensor's codec (see :func:`copy`).
    A delta file becomes a standalone file."""
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


def from_safetensors(src, dst, **options) -> None:
    """A safetensors file -> lazystore (``options`` as :func:`to_lazystore`)."""
    to_lazystore(src, dst, **options)


def from_torch(path, dst, **options) -> None:
    """A torch zip file -> lazystore, through ``torch.load(weights_only=True,
    mmap=True)`` only. Nested state keeps its structure, so ``ls.load(dst)``
    returns what ``torch.load`` did (tensors as torch tensors)."""
    with archives.open_torch(path) as view:
        to_lazystore(view, dst, **options)


def from_npz(path, dst, **options) -> None:
    """An ``.npz`` -> lazystore, one array at a time, never unpickling."""
    with archives.open_npz(path) as view:
        to_lazystore(view, dst, **options)


__all__ = ["carried_metadata", "carried_system_metadata", "copy", "digest_of", "from_npz", "from_safetensors",
           "from_torch", "open_verified", "output_codec", "to_lazystore", "to_safetensors"]
