"""Writing checkpoints: ``ls.save`` (durable when it returns) and
``ls.save_async`` (a future, written in the background), as
torch.distributed.checkpoint has ``save`` and ``async_save``.

Either takes a local path or an fsspec URL (see docs/remote.md), with
``storage_options`` for the URL's filesystem; ``save`` also takes a binary
file object.
"""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, Literal, cast, overload

from lazystore._core import arguments
from lazystore._core.aead import resolve_key
from lazystore.api.types import Key, Target
from lazystore.errors import InvalidInputError
from lazystore.interop import targets
from lazystore.interop.safetensors import SafetensorsWriter, compression_refusal
from lazystore.interop.sharded_writer import ShardedWriter
from lazystore.sources.in_memory import check_binary_file, is_file_object
from lazystore.views import tree
from lazystore.writing import background
from lazystore.writing.interface import TensorWriter
from lazystore.writing.writer import Writer

# The Writer options save passes on as they are (the others are save's own).
_WRITER_OPTIONS = ("alignment", "chunk_bytes", "digest")


@overload
def save(obj: object, path: Target, *, compression: str | None = None, compression_level: int | None = None,
         metadata: Mapping[str, Any] | None = None, storage_options: Mapping[str, Any] | None = None,
         max_shard_size: int | None = None, base: str | os.PathLike | None = None, encryption_key: Key | None = None,
         blocking: Literal[True] = True, **writer_options: Any) -> None: ...


@overload  # deprecated: save_async replaces it
def save(obj: object, path: Target, *, blocking: bool, **options: Any) -> Future[Path | str] | None: ...


def save(obj: object, path: Target, *, compression: str | None = None, compression_level: int | None = None,
         metadata: Mapping[str, Any] | None = None, storage_options: Mapping[str, Any] | None = None,
         max_shard_size: int | None = None, base: str | os.PathLike | None = None, encryption_key: Key | None = None,
         blocking: bool = True, **writer_options: Any) -> Future[Path | str] | None:
    """Write a checkpoint atomically: a flat mapping of names to arrays, or any nested training state.

    ``save`` returns None, as ``torch.save`` and ``numpy.save`` do, once the
    checkpoint is complete and durable; :func:`save_async` writes it in the
    background and returns a future.

    ``obj`` may nest dicts (str or int keys), OrderedDicts, lists and tuples,
    with tensor leaves (numpy arrays and scalars, torch tensors of any device,
    moved to the CPU) and scalar leaves (int, float, bool, None, str). Tensor
    leaves become tensors named by their path joined with "/"; the rest of
    the structure is recorded in the file so :func:`load` rebuilds it. A flat
    mapping of str names to numpy arrays is written as is, with no structure,
    and so is one of str names to torch tensors (a ``state_dict()``), marked
    as torch (a ``.safetensors`` file also gets ``{"format": "pt"}`` in its
    metadata, as transformers writes it, unless ``metadata`` has a
    ``"format"``), and tensors that are one tensor under several names (tied weights)
    stored once in a lazystore file: the same file
    ``lazystore.torch.save_file`` writes. Nothing is pickled.

    The extension of ``path`` decides the format (see docs/training.md):
    ``.safetensors`` writes a genuine safetensors file, lazystore's checksums
    in its metadata (nested state, compression, ``base``, ``alignment`` and
    ``chunk_bytes`` raise InvalidInputError); ``.pt``, ``.pth``, ``.bin``
    and ``.npz`` (formats lazystore does not write) raise InvalidInputError;
    any other name gets a lazystore file.

    ``path`` may be an object-store URL (``s3://``, ``gs://``, ``az://``,
    ``memory://``): the object appears only when its upload completes, and a
    failed save cancels the upload. HTTP(S) URLs are read-only.

    ``writer_options`` are :class:`Writer`'s (``alignment``, ``chunk_bytes``,
    ``digest``). ``digest="blake3"`` (or ``"sha256"``) records a
    cryptographic digest of every chunk (format 1.4), which verified reads
    (``load``'s default, ``open(verify=True)``, ``verify()``) check instead
    of xxh3: see docs/security.md. A sharded save records them in every shard.

    With ``base`` (another checkpoint, a lazystore file in the same folder
    as ``path``), the file is a *delta checkpoint* (format 1.3): each tensor
    the base holds with the same name, dtype and shape is stored as nothing
    if unchanged, or as its lossless difference from the base's when that
    is at least 10% smaller than storing it alone. The file names its base
    and records the content it was coded against (so the base may be
    rewritten, recompressed or made a delta itself, with the same content);
    opening it reads the base as needed, and a base that is missing or
    whose content changed raises BaseCheckpointError naming it. See
    docs/format.md §9.3 and docs/training.md, "Delta checkpoints".

    With ``max_shard_size`` (bytes), ``path`` is a local folder: the tensors
    go into shards ``model-00001-of-0000N-<save id>.lzy`` of at most that size (a
    bigger tensor gets a shard of its own) plus ``lazystore.index.json``,
    which :func:`open` and :func:`load` read as one checkpoint. See
    docs/format.md, "Sharded folders".

    ``path`` may also be a binary file object (``io.BytesIO``, an open file),
    as ``torch.save`` takes one: the checkpoint is written whole, then its
    bytes are written to the object at its position (one file only: no
    ``base``, ``max_shard_size`` or ``storage_options``).

    ``encryption_key`` (32 bytes, or a zero-argument callable returning
    them, such as a KMS call, called once per save) encrypts the file:
    every tensor's bytes are sealed with AES-256-GCM chunk by chunk, and the
    index is authenticated (format 1.4; see docs/format.md, "Sealed
    (encrypted) chunks"). Names, dtypes, shapes and metadata are not
    encrypted. A sharded save encrypts each shard under its own salt; a
    delta (``base``) or a safetensors file cannot be encrypted.

    Parameters
    ----------
    obj : Mapping or nested state
        The tensors: a flat mapping of names to arrays (or torch tensors),
        or nested training state (dicts, lists, tuples; tensor and scalar leaves).
    path : str or os.PathLike or binary file object
        A local path, an object-store URL, or a file object to write into.
    compression : {None, "auto", "zstd", "huffman"}, optional
        How tensors are stored: raw (the default, read in place); "auto",
        the choice recommended for checkpoints (lazystore's codec per
        tensor: today "huffman" for floats, "zstd" for the rest); zstd; or
        huffman (format 1.5: floats with a Huffman-coded exponent, smaller
        than zstd; tensors of other dtypes are stored with zstd).
    compression_level : int, optional
        zstd's level; the codec's default when None.
    metadata : Mapping, optional
        Str keys and JSON values stored in the file, read back as ``metadata``.
    storage_options : Mapping, optional
        The fsspec options of a URL's filesystem.
    max_shard_size : int, optional
        Write a sharded folder, each shard at most this many bytes.
    base : str or os.PathLike, optional
        A lazystore file in the same folder: write a delta checkpoint against it.
    encryption_key : bytes or callable, optional
        32 bytes, or a zero-argument callable returning them: encrypt the file.
    blocking : bool, optional
        Deprecated. True (the default) is accepted and changes nothing;
        ``blocking=False`` warns DeprecationWarning and returns what
        :func:`save_async` returns: call that instead.
    **writer_options
        :class:`Writer`'s ``alignment``, ``chunk_bytes`` and ``digest``.

    Returns
    -------
    None
        Always, unless the deprecated ``blocking=False`` is given: then the
        ``concurrent.futures.Future`` :func:`save_async` returns.

    Raises
    ------
    InvalidInputError
        Bad input or options (an unknown keyword names its close match); the
        refusals above. Nothing is written.
    """
    if not blocking:
        background.deprecated_blocking("lazystore.save", "lazystore.save_async")
        return save_async(obj, cast("str | os.PathLike", path),  # a file object is refused there
                          compression=compression, compression_level=compression_level, metadata=metadata,
                          storage_options=storage_options, max_shard_size=max_shard_size, base=base,
                          encryption_key=encryption_key, **writer_options)
    open_writer = _writer_opener(obj, path, compression=compression, compression_level=compression_level,
                                 metadata=metadata, storage_options=storage_options, max_shard_size=max_shard_size,
                                 base=base, encryption_key=encryption_key, in_background=False, **writer_options)
    if open_writer is not None:  # None: written to a file object already
        background.DEFAULT.save(obj, open_writer, background.write_prepared)
    return None


def save_async(obj: object, path: str | os.PathLike, *, compression: str | None = None,
               compression_level: int | None = None, metadata: Mapping[str, Any] | None = None,
               storage_options: Mapping[str, Any] | None = None, max_shard_size: int | None = None,
               base: str | os.PathLike | None = None, encryption_key: Key | None = None,
               **writer_options: Any) -> Future[Path | str]:
    """Write a checkpoint in the background, as :func:`save` writes it, and return a future at once.

    The call returns as soon as ``obj`` is checked and its tensors are
    copied (the caller may change them right away), as
    ``torch.distributed.checkpoint.async_save`` does; the file is written
    on a worker thread. One background save runs at a time: the next save
    (background or not) waits for it, and raises its error if nobody has
    seen it. See docs/training.md, "Background saves".

    Parameters
    ----------
    obj : Mapping or nested state
        What :func:`save` takes.
    path : str or os.PathLike
        A local path or an object-store URL (not a file object).
    compression : {None, "auto", "zstd", "huffman"}, optional
        As for :func:`save`.
    compression_level : int, optional
        As for :func:`save`.
    metadata : Mapping, optional
        As for :func:`save`.
    storage_options : Mapping, optional
        As for :func:`save`.
    max_shard_size : int, optional
        As for :func:`save`.
    base : str or os.PathLike, optional
        As for :func:`save`.
    encryption_key : bytes or callable, optional
        As for :func:`save`.
    **writer_options
        As for :func:`save`.

    Returns
    -------
    concurrent.futures.Future
        ``result()`` gives the checkpoint's path (a ``Path`` for a local
        one, the URL as given for a remote one) once it is durable, or
        raises the save's error.

    Raises
    ------
    InvalidInputError
        What :func:`save` refuses, and a file object for ``path``: raised
        here, before anything is written.
    """
    open_writer = _writer_opener(obj, path, compression=compression, compression_level=compression_level,
                                 metadata=metadata, storage_options=storage_options, max_shard_size=max_shard_size,
                                 base=base, encryption_key=encryption_key, in_background=True, **writer_options)
    assert open_writer is not None  # a file object was refused
    return background.DEFAULT.save_async(obj, open_writer, background.write_prepared)


def _writer_opener(obj: object, path: Target, *, compression: str | None, compression_level: int | None,
                   metadata: Mapping[str, Any] | None, storage_options: Mapping[str, Any] | None,
                   max_shard_size: int | None, base: str | os.PathLike | None, encryption_key: Key | None,
                   in_background: bool, **writer_options: Any) -> Callable[[], TensorWriter] | None:
    """Check save's options and give what opens its writer; or, for a file
    object (never in the background), write the checkpoint into it and give None."""
    arguments.known_options(writer_options, _WRITER_OPTIONS, others=_SAVE_KEYWORDS)
    if writer_options.get("digest", "") is None:  # the default, said aloud: what every format can do
        del writer_options["digest"]
    key = resolve_key(encryption_key)
    if key is not None:
        writer_options["encryption_key"] = key
    if is_file_object(path):
        if base is not None or max_shard_size is not None or storage_options is not None or in_background:
            raise InvalidInputError("a save to a file object is one file, written before save returns: base, "
                                    "max_shard_size, storage_options and save_async need a path")
        _save_to_file_object(obj, cast(BinaryIO, path), compression=compression, compression_level=compression_level,
                             metadata=metadata, **writer_options)
        return None
    if max_shard_size is not None:
        if storage_options is not None:
            raise InvalidInputError("sharded saves go to a local folder, not a URL")
        if base is not None:
            raise InvalidInputError("a sharded save cannot be a delta against a base")
        # What opens the writer: one class or another, a TensorWriter each.
        writer: Callable[..., TensorWriter] = partial(ShardedWriter, max_shard_size=max_shard_size)
    elif (fmt := targets.format_of(path)) == "safetensors":
        _check_safetensors(obj, path, compression=compression, base=base, options=writer_options)  # refuses a key
        writer = partial(SafetensorsWriter, storage_options=storage_options)
    elif (refused := targets.refusal(path, fmt)) is not None:
        raise InvalidInputError(refused)
    else:
        writer = partial(Writer, storage_options=storage_options, base=base)
    return partial(writer, path, compression=compression, compression_level=compression_level,
                   metadata=metadata, **writer_options)


# save's own keywords, for the close match of a misspelt one.
_SAVE_KEYWORDS = tuple(p.name for p in inspect.signature(save).parameters.values() if p.kind is p.KEYWORD_ONLY)


def _save_to_file_object(obj: object, f: BinaryIO, **options: Any) -> None:
    """Save ``obj`` into the binary file object ``f``: a lazystore file is
    written whole (its index comes last), so it is written to a temporary
    file first, then copied to ``f``."""
    check_binary_file(f, "write")
    with tempfile.TemporaryDirectory(prefix="lazystore-") as tmp:
        path = Path(tmp) / "checkpoint.lzy"
        save(obj, path, **options)
        with path.open("rb") as src:
            shutil.copyfileobj(src, f)


def _check_safetensors(obj: object, path: Target, *, compression: str | None, base: object,
                       options: Mapping[str, Any]) -> None:
    """Refuse, before anything is written, what a safetensors file cannot
    hold: nested state, compression, a delta, lazystore's layout options."""
    why = None
    if not (tree.is_flat(obj) or tree.is_flat_torch(obj)):
        why = ("it holds nested training state, numpy arrays mixed with torch tensors, or tensors that "
               "are nn.Parameter or require grad (only a lazystore file records those; save "
               "{name: t.detach()} for plain tensors); safetensors holds a flat dict of names to tensors")
    elif (refused := compression_refusal(compression)) is not None:
        why = refused
    elif base is not None:
        why = "a delta checkpoint (base=) is a lazystore file"
    elif "encryption_key" in options:
        why = "an encrypted checkpoint (encryption_key=) is a lazystore file"
    elif options:
        why = f"{', '.join(sorted(options))} set(s) the layout of a lazystore file"
    if why is not None:
        raise InvalidInputError(f"{path}: cannot save as safetensors (the .safetensors extension): {why}. "
                                "Save to a .lzy name to write a lazystore file.")

