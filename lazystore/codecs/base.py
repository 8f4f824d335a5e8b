"""The two kinds of codec: one that stores a chunk alone, and one that
stores a chunk as its difference from a base file's chunk. Each has an id
the index records (part of the format) and says how many byte planes it
splits an element into."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np


class CodecBase(ABC):
    """What every codec is: an id in the index, a name, a plane count."""

    id: ClassVar[int]
    name: ClassVar[str | None]

    def planes_for(self, itemsize: int) -> int:
        """The byte planes recorded in the index for elements of ``itemsize`` bytes."""
        return 1


class Codec(CodecBase):
    """One chunk in, one stored blob out, and back.

    ``planes`` is the byte-plane count recorded in the index (1 for codecs
    that do not split bytes). ``decode_into`` must fill exactly ``out`` and
    raise FormatError for malformed input rather than produce more.
    """

    @abstractmethod
    def encode(self, chunk: np.ndarray, planes: int, is_float: bool):
        """Stored bytes for ``chunk`` (a 1-D uint8 array); ``is_float`` lets
        a codec tune itself to float data."""

    @abstractmethod
    def decode_into(self, stored, out: np.ndarray, planes: int) -> None:
        """Decode ``stored`` into ``out`` (a 1-D uint8 array of the chunk's size)."""


class DeltaCodec(CodecBase):
    """A chunk stored as its difference from the base file's chunk: coded
    against the base's decoded bytes, and decoded onto them."""

    @abstractmethod
    def encode_delta(self, chunk: np.ndarray, base: np.ndarray, planes: int, word: int, is_float: bool):
        """Stored bytes for ``chunk`` against ``base`` (both 1-D uint8, the same length)."""

    @abstractmethod
    def add_into(self, stored, out: np.ndarray, planes: int, word: int) -> None:
        """Turn ``out``, holding the base's decoded bytes of the chunk, into
        the chunk's own decoded bytes; FormatError for malformed input."""
