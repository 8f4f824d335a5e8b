"""Codecs 128 and 129 (format 1.4): codec 0 or 1, sealed; codec 132 (format 1.5): codec 4, sealed.

A sealed chunk is the inner codec's stored bytes encrypted with AES-256-GCM,
then its 16-byte tag (docs/format.md, "Sealed (encrypted) chunks"). Its id
is 128 plus the inner codec's, so every reader older than 1.4 refuses a
sealed tensor as a newer format's (rule E3) instead of handing out
ciphertext as weights.

Opening a chunk needs the file's key and the chunk's place (its nonce and
associated data): :class:`lazystore.views.chunk_reader.ChunkReader` opens it
with the file's :class:`~lazystore._core.aead.Opener`, then decodes the
plaintext with :attr:`Sealed.inner`. The codec itself only says what is
stored and how it decodes once opened. Sealed deltas (130, 131) are not
defined: a delta records checksums of its base's plaintext.
"""

from __future__ import annotations

from typing import ClassVar

from lazystore.codecs.base import Codec, CodecBase
from lazystore.codecs.float_planes import FloatPlanes
from lazystore.codecs.raw import RAW
from lazystore.codecs.zstd import ZstdPlanes

SEALED_BASE = 128  # a sealed codec's id is this plus its inner codec's


class Sealed(CodecBase):
    """Codec ``128 + inner.id``: ``inner``'s stored bytes, encrypted and tagged."""

    inner: ClassVar[Codec]
    since: ClassVar[int] = 4  # format 1.4

    def planes_for(self, itemsize: int) -> int:
        return self.inner.planes_for(itemsize)


class SealedRaw(Sealed):
    id = SEALED_BASE + RAW.id
    name = "sealed"  # what info().compression says
    inner = RAW


class SealedZstd(Sealed):
    id = SEALED_BASE + ZstdPlanes.id
    name = "sealed+zstd"
    inner = ZstdPlanes()  # decoding needs no level


class SealedFloatPlanes(Sealed):
    id = SEALED_BASE + FloatPlanes.id
    name = "sealed+huffman"
    inner = FloatPlanes()  # decoding needs no level
    since = FloatPlanes.since


SEALED_CODECS: dict[int, Sealed] = {c.id: c for c in (SealedRaw(), SealedZstd(), SealedFloatPlanes())}
SEALED_CODEC_IDS = frozenset(SEALED_CODECS)


def sealed_codec_of(inner: CodecBase) -> Sealed:
    """The sealed codec of the codec a chunk was encoded with (raw, zstd or
    huffman: sealed deltas are not defined, and a writer that encrypts has no base)."""
    return SEALED_CODECS[SEALED_BASE + inner.id]
