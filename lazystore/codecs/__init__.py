"""Chunk codecs: how one chunk's decoded bytes become stored bytes.

Each codec has an id written in the index (part of the format), encodes a
chunk in one call and decodes it into a caller's buffer. Checksums are not a
codec's business: they cover the stored bytes and live in ``lazystore/_core/checksum.py``.
"""

from lazystore.codecs.base import Codec, CodecBase, DeltaCodec
from lazystore.codecs.delta import DELTA_CODEC_IDS, ContentDeltaPlanes, DeltaPlanes
from lazystore.codecs.float_planes import FloatPlanes
from lazystore.codecs.raw import RAW
from lazystore.codecs.registry import CODECS_BY_ID, codec_for
from lazystore.codecs.sealed import SEALED_CODEC_IDS, Sealed
from lazystore.codecs.zstd import ZstdPlanes

__all__ = ["CODECS_BY_ID", "DELTA_CODEC_IDS", "RAW", "SEALED_CODEC_IDS", "Codec", "CodecBase", "ContentDeltaPlanes",
           "DeltaCodec", "DeltaPlanes", "FloatPlanes", "Sealed", "ZstdPlanes", "codec_for"]
