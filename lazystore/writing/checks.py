"""What a :class:`~lazystore.Writer` checks of its arguments before it writes
a byte: its options, the user's metadata, and each array it is given. The
writers that make Writers later (a sharded folder's, one per shard) check
their options with the same functions when they are built."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from lazystore._core import arguments, strict_json
from lazystore._core.dtypes import DtypeSpec, spec_for
from lazystore._native import layout as fmt
from lazystore.codecs import Codec, codec_for
from lazystore.errors import InvalidInputError


def check_options(compression: Any, compression_level: int | None, alignment: int,
                  chunk_bytes: int) -> tuple[Codec, int, int]:
    """A Writer's compression and layout options, checked before anything is
    made (an unknown codec, a level zstd does not have, an alignment that is
    no power of two raise InvalidInputError naming the option): the default
    codec, the alignment and the chunk size. The writers that make Writers
    later (a sharded folder's, one per shard) check theirs with it when built."""
    codec = codec_for(compression, compression_level)
    alignment = arguments.integer("alignment", alignment, 8, 1 << 30)
    if alignment & (alignment - 1):
        raise InvalidInputError(f"alignment must be a power of two between 8 and 2**30, got {alignment}")
    chunk_bytes = arguments.integer("chunk_bytes", chunk_bytes, 16, 1 << 31)
    return codec, alignment, chunk_bytes


def check_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of the user's ``metadata`` (None: empty), checked as a file
    will hold it: str keys, none reserved, JSON values. Fails now, not after
    writing gigabytes."""
    metadata = arguments.json_object("metadata", metadata)
    check_user_metadata(metadata)
    encode_metadata(metadata)
    return metadata


def storable(array: Any) -> tuple[np.ndarray, DtypeSpec]:
    """C-contiguous little-endian ndarray of a supported dtype (no copy if it is one)."""
    try:
        arr = np.asarray(array)
    except Exception as exc:  # noqa: BLE001 - any conversion failure is bad input
        raise InvalidInputError(f"cannot convert {type(array).__name__} to an array: {exc}") from None
    spec = spec_for(arr.dtype)
    # order="C" (not ascontiguousarray, which turns 0-d arrays into 1-d ones)
    return np.asarray(arr, dtype=spec.dtype, order="C"), spec


def check_user_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata``, once its keys are checked: str, and none reserved for lazystore."""
    for key in metadata:
        if not isinstance(key, str):
            raise InvalidInputError(f"metadata keys must be str, got {key!r}")
        if key.startswith(fmt.RESERVED_METADATA_PREFIX):
            raise InvalidInputError(f"metadata key {key!r} is reserved for lazystore")
    return metadata


def encode_metadata(metadata: Mapping[str, Any]) -> bytes:
    """The index's metadata member: compact JSON text (empty for none), within
    the size readers accept."""
    if not metadata:
        return b""
    try:
        text = json.dumps(metadata, allow_nan=False, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidInputError(f"metadata must be JSON-serialisable (no NaN/inf, valid text): {exc}") from None
    problem = strict_json.size_problem(text)  # what readers refuse to parse (format.md §11.6)
    if problem is not None:
        raise InvalidInputError(f"metadata too large: {problem}")
    return text
