"""One lazystore file from a distributed checkpoint, for inference:
:func:`consolidate` (``lazystore convert DCP_FOLDER out.lzy`` on the command
line), lazystore's counterpart of torch's ``dcp_to_torch_save``.

Each full tensor is assembled from the chunks the ranks saved of it (which
may lie in several rank files) a band of rows at a time, and streamed into
:class:`lazystore.Writer` with ``add_pieces``: memory holds one band
(:data:`BAND_BYTES`) plus the writer's window, never a whole tensor or the
model. The output is written as every lazystore save is (temporary file,
fsync, rename): a consolidation that fails leaves nothing at ``out_path``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from lazystore._core import frameworks, globs
from lazystore._core.naming import naming
from lazystore.dcp.folders import DcpFolder
from lazystore.dcp.saved import SavedBytes, SavedTensor
from lazystore.dcp.torch_chunks import Unloadable, load_value
from lazystore.errors import InvalidInputError
from lazystore.writing.writer import Writer

# Rows of a full tensor assembled at once (the writer then holds up to its
# own window, lazystore.writing.writer.WINDOW_BYTES, of them).
BAND_BYTES = 16 << 20
# A non-tensor item larger than this is not read: what goes into a file's
# metadata is small (a step, a learning rate, a config).
MAX_ITEM_BYTES = 16 << 20
# The user-metadata key holding the non-tensor items kept.
ITEMS_KEY = "dcp_items"
_NON_TENSORS = ("metadata", "skip")
_JSON_DEPTH = 32


@dataclass(frozen=True)
class Consolidated:
    """What :func:`consolidate` wrote.

    Attributes
    ----------
    path : str
        The file written.
    tensors : int
        The tensors it holds.
    nbytes : int
        Their bytes in all.
    items : dict
        The non-tensor items kept in the file's metadata (fqn -> value).
    skipped : dict
        The non-tensor items left out (fqn -> why).
    """

    path: str
    tensors: int
    nbytes: int
    items: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)


def consolidate(folder: str | os.PathLike[str], out_path: str | os.PathLike[str], *, compression: str | None = None,
                compression_level: int | None = None, keys: str | None = None, non_tensors: str = "metadata",
                verify: bool = True, digest: str | None = None) -> Consolidated:
    """Write a DCP checkpoint as one lazystore file, for inference.

    The checkpoint in the local ``folder`` (saved by
    :class:`lazystore.dcp.LazyStoreWriter` or torch's ``FileSystemWriter``)
    is written at ``out_path``: each tensor whole, under its DCP name
    (``"model.layers.0.weight"``: the state dict's keys joined with dots),
    marked as torch tensors, so ``lazystore.torch.load_file(out_path)``
    gives the flat state dict and ``ls.open`` reads any part of it lazily.
    Bad input raises lazystore's errors naming the file, and nothing is
    written then.

    Parameters
    ----------
    folder : str or os.PathLike
        The DCP checkpoint's local folder.
    out_path : str or os.PathLike
        The lazystore file to write.
    compression : {None, "auto", "zstd", "huffman"}, optional
        As for :class:`lazystore.Writer`.
    compression_level : int, optional
        As for :class:`lazystore.Writer`.
    keys : str, optional
        A glob (``"model.*"``) keeping only the matching names, e.g. the
        model without its optimizer state.
    non_tensors : {"metadata", "skip"}, optional
        What becomes of the checkpoint's non-tensor items (DCP
        ``torch.save``\\ s them into bytes). ``"metadata"`` (default)
        reads each with ``torch.load(weights_only=True)`` semantics only and
        keeps plain values (None, bool, int, float, str, and lists and dicts
        of them) in the file's metadata under ``"dcp_items"``; any other
        (refused by torch's weights-only unpickler, holding tensors or
        objects, larger than 16 MiB) is skipped and named in the result's
        ``skipped``. ``"skip"`` reads none of them.
    verify : bool, optional
        Check raw tensors of lazystore rank files against their checksums as
        they are read (compressed chunks, and the CRC-32s of torch's files,
        are always checked).
    digest : {None, "blake3", "sha256"}, optional
        Chunk digests, as for :class:`lazystore.Writer`.

    Returns
    -------
    Consolidated
        What was written, and which non-tensor items were kept or skipped.

    Raises
    ------
    InvalidInputError
        ``non_tensors`` is neither ``"metadata"`` nor ``"skip"``.
    CheckpointNotFoundError
        There is no ``folder``.
    FormatError
        Not a DCP folder, a missing rank file or item, metadata that
        contradicts itself or its files, a pickle that names anything but
        DCP's metadata classes.
    ChecksumError
        Damaged bytes.
    TensorNotFoundError
        ``keys`` matches no name.
    """
    if non_tensors not in _NON_TENSORS:
        raise InvalidInputError(f"non_tensors must be one of {_NON_TENSORS}, got {non_tensors!r}")
    with DcpFolder(folder, verify=verify) as saved:
        tensors, items = saved.tensors, saved.items
        if keys is not None:
            wanted = set(globs.matching([t.fqn for t in tensors] + [i.fqn for i in items], keys,
                                        f"the DCP checkpoint {saved.folder}"))
            tensors = [t for t in tensors if t.fqn in wanted]
            items = [i for i in items if i.fqn in wanted]
        kept, skipped = _non_tensor_values(items, non_tensors)
        metadata = {ITEMS_KEY: kept} if kept else {}
        with Writer(out_path, compression=compression, compression_level=compression_level,
                    metadata=metadata, digest=digest) as w:
            w.system_metadata[frameworks.FRAMEWORK_KEY] = frameworks.TORCH
            for t in tensors:
                w.add_pieces(t.fqn, _bands(t), dtype=t.spec.dtype, shape=t.shape)
    nbytes = sum(math.prod(t.shape) * t.spec.dtype.itemsize for t in tensors)
    return Consolidated(os.fspath(out_path), len(tensors), nbytes, kept, skipped)


def _bands(t: SavedTensor):
    """The full tensor in C order, a band of rows at a time, each assembled
    from the parts of the chunks that hold those rows."""
    if not t.shape:  # a 0-d tensor: one chunk, one element
        band = np.empty((), dtype=t.spec.dtype)
        for c in t.chunks:
            with naming(c.file):
                band[...] = c.reader.rows(0, 1).reshape(())
        yield band
        return
    row_bytes = math.prod(t.shape[1:]) * t.spec.dtype.itemsize
    step = max(1, BAND_BYTES // row_bytes) if row_bytes else max(t.shape[0], 1)
    chunks = sorted(t.chunks, key=lambda c: c.offsets)
    for top in range(0, t.shape[0], step):
        bottom = min(top + step, t.shape[0])
        band = np.empty((bottom - top, *t.shape[1:]), dtype=t.spec.dtype)
        for c in chunks:
            lo, hi = max(top, c.offsets[0]), min(bottom, c.offsets[0] + c.sizes[0])
            if lo >= hi or not math.prod(c.sizes[1:]):
                continue
            with naming(c.file):
                part = c.reader.rows(lo - c.offsets[0], hi - c.offsets[0])
            place = (slice(lo - top, hi - top),) + tuple(slice(o, o + s) for o, s in zip(c.offsets[1:], c.sizes[1:]))
            band[place] = part
        yield band


def _non_tensor_values(items: list[SavedBytes], mode: str) -> tuple[dict, dict]:
    """(fqn -> plain value kept, fqn -> why skipped)."""
    kept: dict = {}
    skipped: dict = {}
    for item in items:
        if mode == "skip":
            skipped[item.fqn] = "non_tensors='skip'"
            continue
        if item.nbytes > MAX_ITEM_BYTES:
            skipped[item.fqn] = f"{item.nbytes} bytes, more than the {MAX_ITEM_BYTES} read for metadata"
            continue
        try:
            value = load_value(item.load(), item.fqn)
        except Unloadable as exc:
            skipped[item.fqn] = f"torch.load(weights_only=True) refused it: {exc}"
            continue
        plain = _plain(value, _JSON_DEPTH)
        if plain is _NOT_PLAIN:
            skipped[item.fqn] = f"holds a {type(value).__name__}, not plain data (None, bool, int, float, str, " \
                                "lists and dicts of them)"
            continue
        kept[item.fqn] = plain
    return kept, skipped


_NOT_PLAIN = object()


def _plain(value, depth: int):
    """``value`` as JSON data (tuples as lists), or _NOT_PLAIN."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return value if math.isfinite(value) else _NOT_PLAIN
    if depth <= 0:
        return _NOT_PLAIN
    if type(value) in (list, tuple):
        out = [_plain(v, depth - 1) for v in value]
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in out) else out
    if isinstance(value, dict) and all(type(k) is str for k in value):
        fields = {k: _plain(v, depth - 1) for k, v in value.items()}
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in fields.values()) else fields
    return _NOT_PLAIN
