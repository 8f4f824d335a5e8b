"""Chunk codecs: how one chunk's decoded bytes become stored bytes.

Each codec has an id written in the index (part of the format), encodes a
chunk in one call and decodes it into a caller's buffer. Checksums are not a
codec's business: they cover the stored bytes and live in ``checksum.py``.
"""

from __future__ import annotations

from lazystore.errors import InvalidInputError
from lazystore.codecs.base import Codec
from lazystore.codecs.raw import RAW
from lazystore.codecs.zstd import ZstdPlanes

CODECS_BY_ID: dict[int, Codec] = {RAW.id: RAW, ZstdPlanes.id: ZstdPlanes()}


def codec_for(compression, level: int | None = None) -> Codec:
    """The codec for a ``compression=`` argument: None, "zstd", or a Codec."""
    if compression is None or compression == "none":
        return RAW
    if isinstance(compression, Codec):
        return compression
    if compression == "zstd":
        return ZstdPlanes(level=level)
    raise InvalidInputError(f"unknown compression {compression!r}; use None or 'zstd'")


__all__ = ["Codec", "RAW", "ZstdPlanes", "CODECS_BY_ID", "codec_for"]
