"""Codecs 2 (format 1.2) and 3 (format 1.3): a chunk stored as its difference
from the base's chunk.

Successive checkpoints of a fine-tune differ in the low mantissa bits of
their floats. Taking the difference of the bit patterns as integers (word
by word, modulo 2^bits), then zigzag (0, -1, 1, -2, ... to 0, 1, 2, 3, ...)
so that a small step down costs as few high bits as a small step up, leaves
words whose high bytes are nearly all zero; those compress as codec 1 does,
zstd over byte planes. On a real fine-tune the zigzag difference stores
smaller than the XOR of the bits or the plain difference (the figures:
docs/benchmarks.md, "Figures behind the code").

A chunk whose bytes equal the base's is stored as nothing at all (zero
stored bytes): unchanged tensors, a frozen base among them, cost only their
chunk records. docs/format.md §9.3 is the normative description.

The two codecs store the same bytes; they differ in how the base is
identified. Codec 2 trusts a base whose index is the one recorded, so
rewriting a base (recompressed, or made a delta against a newer file)
orphans it. Codec 3 records, per chunk, the checksum of the base chunk's
decoded bytes, and is checked against that: a base re-encoded with the same
content stays its base.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from lazystore._core.scratch import scratch
from lazystore.codecs import compiled
from lazystore.codecs.base import DeltaCodec
from lazystore.codecs.zstd import ZstdPlanes
from lazystore.errors import FormatError

_UINT: dict[int, type[np.unsignedinteger]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@cache  # asked once per chunk read: a dtype's name is built anew on each call
def word_size(dtype: np.dtype) -> int:
    """The integer width a dtype's difference is taken over: the element,
    or each of a complex number's two parts (complex32, complex64, complex128)."""
    return dtype.itemsize // 2 if dtype.name.startswith("complex") else dtype.itemsize


def zigzag_difference(new: np.ndarray, base: np.ndarray, word: int) -> np.ndarray:
    """``zigzag((new - base) mod 2^(8 word))`` of two equal-length uint8
    buffers, word by word (little-endian), as uint8."""
    t = _UINT[word]
    d = new.view(t) - base.view(t)  # unsigned: wraps modulo 2^bits
    s = d.view(np.dtype(t).str.replace("u", "i"))
    z = (s << 1) ^ (s >> (8 * word - 1))  # arithmetic shift: all ones for a negative difference
    return z.view(np.uint8)


def add_zigzag_into(out: np.ndarray, zigzag: np.ndarray, word: int) -> None:
    """``out += unzigzag(zigzag)`` word by word, modulo 2^(8 word): undoes
    :func:`zigzag_difference` given the base's bytes in ``out``. ``zigzag``
    is overwritten (in place: no temporary the size of a chunk)."""
    t = _UINT[word]
    z = zigzag.view(t)
    # A fresh array for the sign on every chunk cost a fifth of this function.
    sign = scratch("delta zigzag sign", zigzag.nbytes).view(t)
    np.bitwise_and(z, t(1), out=sign)
    np.negative(sign, out=sign)  # 0 or all ones (unsigned negation wraps)
    np.right_shift(z, t(1), out=z)
    np.bitwise_xor(z, sign, out=z)  # z is now the signed difference, as unsigned bits
    view = out.view(t)
    np.add(view, z, out=view)


@dataclass(frozen=True)
class DeltaPlanes(DeltaCodec):
    """Codec 2 (format 1.2): the zigzag difference from the base's chunk, stored as codec 1 stores a chunk.

    Parameters
    ----------
    level : int or None, optional
        The zstd level, as :class:`ZstdPlanes`'s: None tunes it per dtype.
    """

    level: int | None = None  # as ZstdPlanes: None tunes the zstd setting per dtype

    id = 2
    name = "delta"
    since = 2  # format 1.2

    def planes_for(self, itemsize: int) -> int:
        return itemsize

    def encode_delta(self, chunk: np.ndarray, base: np.ndarray, planes: int, word: int, is_float: bool) -> bytes:
        if np.array_equal(chunk, base):
            return b""
        return ZstdPlanes(self.level).encode(zigzag_difference(chunk, base, word), planes, is_float)

    def add_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, word: int) -> None:
        if not len(stored):
            return  # unchanged: the base's bytes are the chunk's
        if len(out) % word:
            raise FormatError(f"corrupt chunk: {len(out)} bytes are not whole {word}-byte words")
        if compiled.kernels is not None and planes == word and word in (2, 4, 8):
            # Interleaving, zigzag decoding and adding in one pass.
            compiled.kernels.add_unzigzag(ZstdPlanes().decode_planes(stored, out, planes), out)
            return
        zigzag = scratch("delta zigzag", len(out))
        ZstdPlanes().decode_into(stored, zigzag, planes)
        add_zigzag_into(out, zigzag, word)


@dataclass(frozen=True)
class ContentDeltaPlanes(DeltaPlanes):
    """Codec 3 (format 1.3): codec 2's stored bytes, against a base identified by its chunks' content.

    Each chunk record holds the xxh3 of the base chunk's decoded bytes,
    rather than the file recording its base's index checksum.

    Parameters
    ----------
    level : int or None, optional
        The zstd level, as :class:`ZstdPlanes`'s: None tunes it per dtype.
    """

    id = 3
    since = 3  # format 1.3


# Every codec whose chunks are differences from a base file's.
DELTA_CODEC_IDS = frozenset({DeltaPlanes.id, ContentDeltaPlanes.id})
