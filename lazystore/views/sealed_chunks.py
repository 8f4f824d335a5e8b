"""Opening a sealed chunk (codec 128 or 129, format 1.4; 132, format 1.5) into place.

The chunk's stored bytes are checked first, as any chunk's are (its xxh3,
or its digest); then its tag is checked while it is decrypted, and only
then is the plaintext decoded. A codec-128 chunk is decrypted straight
into the tensor's memory, a codec-129 or 132 one into this thread's scratch
memory and decoded from there as codec 1 or 4. A tag that fails leaves zeros,
never the unauthenticated plaintext, where the chunk was to go.
"""

from __future__ import annotations

from lazystore._core.aead import TAG_BYTES, Opener
from lazystore._core.scratch import scratch
from lazystore._native.index import Entry
from lazystore.codecs.raw import RAW
from lazystore.codecs.sealed import SEALED_CODECS
from lazystore.errors import FormatError


def open_sealed(opener: Opener | None, entry: Entry, c: int, target, blob) -> None:
    """Open chunk ``c`` of sealed ``entry`` (its checked stored bytes
    ``blob``) and decode it into ``target``."""
    assert opener is not None  # ChunkReader refuses a sealed tensor read without the key
    inner = SEALED_CODECS[entry.codec].inner
    g = entry.first_chunk + c  # the chunk's global number: its nonce
    if inner is RAW:  # rule S1: the plaintext is the chunk's decoded bytes
        opener.open_into(blob, target, entry.name, c, g)
        return
    plain = scratch("open sealed", len(blob) - TAG_BYTES)  # rule S2: at least the tag
    opener.open_into(blob, plain, entry.name, c, g)
    try:
        inner.decode_into(plain, target, entry.planes, dtype=entry.dtype)
    except FormatError as exc:
        raise FormatError(f"tensor {entry.name!r} chunk {c}: {exc}") from None
