"""Reading checkpoints: ``ls.open`` (lazily) and ``ls.load`` (as saved).

Each takes a local path or an fsspec URL (``s3://``, ``gs://``,
``http(s)://``, ``memory://``, ``file://``; see docs/remote.md), with
``storage_options`` for the URL's filesystem. Local paths and ``file://``
URLs are memory-mapped; remote checkpoints are read with range requests.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from lazystore._core import frameworks, staging, torch_reads
from lazystore._core import torch_arrays as torch_adapter
from lazystore._core.aead import resolve_key
from lazystore._native.base_ref import BASE_KEY
from lazystore.api.types import Key, Names, Target
from lazystore.errors import BaseCheckpointError, InvalidInputError
from lazystore.interop.detect import open_view
from lazystore.interop.folders import open_path
from lazystore.signing.anchor import anchor_for, refuse_unchecked
from lazystore.sources.in_memory import BytesSource, is_file_object, read_file_object
from lazystore.views import tree
from lazystore.views.base import ViewBase
from lazystore.views.checkpoint import CheckpointView


def open(path: Target, *, verify: bool = False,  # noqa: A001 - ls.open reads as the built-in open does, on purpose
         storage_options: Mapping[str, Any] | None = None, mmap: bool = True, encryption_key: Key | None = None,
         public_key: Any = None, signature: str | os.PathLike | None = None,
         index_sha256: str | None = None) -> ViewBase:
    """Open a checkpoint lazily: only the index is read.

    From a URL, that is at most two small requests: the object's size and its tail.

    The format is told by content, not by extension: a lazystore file, a
    safetensors file (a zero-copy view, as lazystore files are; see
    docs/interop.md), a local folder of shards (lazystore's, or a
    Hugging Face folder with ``model.safetensors.index.json``), which opens
    as one view over all its shards, or a local folder holding one weights
    file (``*.safetensors`` or ``*.lzy``, beside ``config.json`` and the
    like, as Hugging Face lays out a model), which opens as that file.

    Returns a :class:`~lazystore.ViewBase` (the contract every view keeps):
    a :class:`~lazystore.CheckpointView` for a file, a ``ShardedView`` for
    a folder of shards.

    The view maps tensor names to numpy arrays. For nested state saved with
    :func:`save` the names are the tensor leaves' paths joined with "/"
    (e.g. ``optimizer/state/0/exp_avg``).

    With ``verify=True`` each raw tensor is checked against its checksums on
    first access (compressed chunks are always checked when decoded, and so
    is everything fetched from a URL). A file that records no checksums (a
    safetensors file lazystore did not write) cannot be read so: it raises
    VerificationUnavailableError, as ``verify()`` of it does.

    ``mmap=False`` reads a local file with ``pread`` instead of mapping it:
    every read is a copy, but no page of the file stays resident in this
    process, so streaming through a checkpoint larger than memory (as
    ``lazystore convert`` and ``verify`` do) keeps memory bounded.

    ``storage_options`` configure the fsspec filesystem of a URL (e.g.
    ``{"key": ..., "secret": ..., "client_kwargs": {"endpoint_url": ...}}``
    for s3fs); local paths ignore them.

    ``path`` may also be a binary file object (``io.BytesIO``, an open
    file), as ``torch.load`` takes one: its bytes from its position on are
    read into memory and the view reads them there.

    ``encryption_key`` (32 bytes, or a zero-argument callable returning
    them, called once) reads an encrypted checkpoint (see :func:`save`).
    Opening checks that it is the file's key (EncryptionKeyError if not)
    and that the index is the one written (DecryptionError if not); every
    chunk read is authenticated as it is decrypted. Without it, an
    encrypted file still opens, and its names, dtypes, shapes and metadata
    can be read: reading a tensor raises EncryptionKeyError. A key given
    for a file that is not encrypted raises EncryptionKeyError.

    ``public_key`` (a PEM file's path, PEM bytes or a ``cryptography`` key)
    opens a signed checkpoint: the signature (``signature``, by default
    ``path + ".sig"``, or ``DIR/model.sig`` for a folder of shards, read
    through the same storage) and the index it vouches for are checked
    before anything else is read, and every chunk read afterwards is checked
    against its digest (the view is opened with ``verify=True``). A missing,
    forged or mismatched signature raises SignatureError.
    ``index_sha256`` (64 hex characters, what ``lazystore info`` prints)
    pins the index instead of a signature, with the same checks. Both need
    a file with chunk digests. See docs/signing.md and docs/security.md.

    Parameters
    ----------
    path : str or os.PathLike or binary file object
        A file, a folder of shards, an fsspec URL, or a file object.
    verify : bool, optional
        Check each raw tensor against its checksums on first access.
    storage_options : Mapping, optional
        The fsspec options of a URL's filesystem.
    mmap : bool, optional
        Map a local file (the default), or read it with ``pread``.
    encryption_key : bytes or callable, optional
        The key of an encrypted checkpoint.
    public_key : str or os.PathLike or bytes or cryptography public key, optional
        Check the checkpoint's signature against this key first.
    signature : str or os.PathLike, optional
        Where the signature is, when not beside the checkpoint.
    index_sha256 : str, optional
        The index's SHA-256 (64 hex characters) to pin it to.

    Returns
    -------
    ViewBase
        A :class:`CheckpointView` for a file, a ``ShardedView`` for a folder
        of shards; use it as a context manager, or ``close()`` it.

    Raises
    ------
    InvalidInputError
        ``public_key`` or ``index_sha256`` with a file object.
    FormatError
        What is there is not a checkpoint lazystore reads.
    SignatureError
        A missing, forged or mismatched signature or pinned index.
    EncryptionKeyError
        A key that is not the file's, or one given for a file not encrypted.
    VerificationUnavailableError
        ``verify=True`` for a file that records no checksums.
    """
    if is_file_object(path):
        if public_key is not None or index_sha256 is not None:
            raise InvalidInputError("public_key= and index_sha256= check a checkpoint opened by its path or URL")
        return _open_in_memory(read_file_object(path), verify, encryption_key)
    anchor = anchor_for(path, public_key=public_key, signature=signature, index_sha256=index_sha256,
                        storage_options=storage_options)
    return open_path(path, verify=verify or anchor is not None, storage_options=storage_options, mmap=mmap,
                     anchor=anchor, encryption_key=encryption_key)



def load(path: Target, keys: Names | None = None, *, map_location: Any = None, verify: bool = True,
         storage_options: Mapping[str, Any] | None = None, encryption_key: Key | None = None, public_key: Any = None,
         signature: str | os.PathLike | None = None, index_sha256: str | None = None) -> Any:
    """Read a checkpoint back, as it was saved.

    A flat checkpoint (no nested structure) gives a dict of names to arrays,
    or to torch tensors on ``map_location`` when it is marked as torch (a
    ``state_dict()`` saved flat) or its metadata says ``{"format": "pt"}``
    (safetensors files from transformers), names saved as one tensor as one tensor
    object. Nested state comes back with the same structure and types: tuples stay
    tuples, int keys ints, torch tensors torch tensors (on ``map_location``:
    "cpu", "cuda:0" or a torch.device; None means the CPU), numpy arrays
    numpy arrays. ``map_location`` is never ignored: where nothing loaded is
    a torch tensor (a flat numpy checkpoint, numpy state), any device but the CPU
    raises InvalidInputError pointing at ``lazystore.torch.load_file``, which
    returns torch tensors on a device.

    Everything returned is checked against its checksums first: a damaged
    tensor raises ChecksumError naming it. ``verify=False`` skips the check
    of raw tensors (compressed ones are checked as they are decoded, and
    everything fetched from a URL always is); files that record no
    checksums (safetensors files lazystore did not write) load unchecked.

    Arrays and tensors are writable. Raw tensors of a local file are private
    copy-on-write views of it (see :meth:`CheckpointView.load`): nothing is
    copied, and writing to them never changes the file (checking them reads
    their pages in; with ``verify=False`` nothing is read until touched).
    Torch tensors share that memory (``torch.from_numpy``); compressed
    tensors are decoded.

    ``keys`` selects tensors by name (their joined paths): a glob pattern
    (str) or an iterable of exact names; a glob that matches nothing raises
    TensorNotFoundError, as an unknown name does (an empty list gives an
    empty result). For nested state the result is the
    sub-tree holding just those tensors and the containers on their paths;
    scalars are left out, and lists and tuples keep the selected elements in
    order.

    From a URL (``storage_options`` as for :func:`open`), only the index and
    the selected tensors' bytes are fetched: neighbouring ranges merged into
    one request, requests sent concurrently, every byte checked against its
    checksum.

    ``encryption_key`` reads an encrypted checkpoint, as for :func:`open`.
    ``public_key``, ``signature`` and ``index_sha256`` check a signed (or
    pinned) checkpoint as :func:`open` does; every tensor loaded is then
    checked against its chunk digests (``verify=False`` is refused with them).

    Parameters
    ----------
    path : str or os.PathLike or binary file object
        What :func:`open` takes.
    keys : str or iterable of str, optional
        A glob pattern, or exact names: load only these tensors.
    map_location : str or torch.device, optional
        Where torch tensors go (None: the CPU).
    verify : bool, optional
        Check every raw tensor against its checksums (the default).
    storage_options : Mapping, optional
        The fsspec options of a URL's filesystem.
    encryption_key : bytes or callable, optional
        The key of an encrypted checkpoint.
    public_key : str or os.PathLike or bytes or cryptography public key, optional
        As for :func:`open`.
    signature : str or os.PathLike, optional
        As for :func:`open`.
    index_sha256 : str, optional
        As for :func:`open`.

    Returns
    -------
    dict or nested state
        The state as it was saved: a dict of names to arrays (or torch
        tensors) for a flat checkpoint, the saved structure for nested state.

    Raises
    ------
    InvalidInputError
        ``verify=False`` with a signature or pin; a ``map_location`` other
        than the CPU where nothing loaded is a torch tensor.
    TensorNotFoundError
        A name, or a glob, in ``keys`` that matches no tensor.
    ChecksumError
        A tensor whose bytes fail their checksums.
    """
    refuse_unchecked(verify, public_key, index_sha256)
    # Checked by each load(verify=...) below, which checks what the file
    # records; open(verify=True) would refuse a file that records nothing.
    with open(path, storage_options=storage_options, encryption_key=encryption_key, public_key=public_key,
              signature=signature, index_sha256=index_sha256) as ck:
        structure = ck.system_metadata.get(tree.TREE_KEY)
        if structure is None and frameworks.saved_from_torch(ck.metadata, ck.system_metadata):
            torch_adapter.require()
            return torch_reads.tensors_of(ck, keys, torch_adapter.device(map_location), verify=verify)
        if structure is None:
            torch_adapter.check_nothing_to_place(map_location)  # never ignored: see its docstring
            return ck.load(keys, verify=verify)
        root, names = tree.parse(structure, ck.keys())
        if keys is None:
            selected = None
            arrays = ck.load(verify=verify)
        else:
            arrays = ck.select(keys).load(verify=verify)
            selected = set(arrays)
    dev = None
    if tree.has_torch(root, selected):
        dev = torch_adapter.device(map_location)
    else:
        torch_adapter.check_nothing_to_place(map_location)

    with staging.Placement(dev) as place:

        def make_torch(arr: Any, node: Any) -> Any:
            return torch_adapter.with_attributes(place.tensor(arr), node)

        return tree.build(root, arrays, make_torch, selected)



def open_bytes(data: bytes | bytearray | memoryview, *, verify: bool = False,
               encryption_key: Key | None = None) -> CheckpointView:
    """The view of a checkpoint held in bytes (what ``lazystore.torch.load``
    and ``lazystore.numpy.load`` read): lazystore or safetensors bytes,
    read where they are."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError(f"expected the bytes of a checkpoint, got {type(data).__name__}")
    return _open_in_memory(BytesSource(data), verify, encryption_key)



def _open_in_memory(source: Any, verify: bool, encryption_key: Key | None = None) -> CheckpointView:
    """The view of a checkpoint held in memory. A delta checkpoint is
    refused: its base is a file beside it, and bytes are beside nothing."""
    ck = open_view(source, verify=verify, encryption_key=resolve_key(encryption_key))
    if BASE_KEY in ck.system_metadata:
        ck.close()
        raise BaseCheckpointError(f"{source.name} is a delta checkpoint: read it from its file, beside its base")
    return ck

