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
    # The format minor version that introduced the codec: a file holding
    # it is at least 1.<since> (docs/format.md §14), as a dtype's ``since``.
    since: ClassVar[int] = 0

    def planes_for(self, itemsize: int) -> int:
        """The byte planes recorded in the index for elements of ``itemsize`` bytes.

        Parameters
        ----------
        itemsize : int
            The size of one element, in bytes.

        Returns
        -------
        int
            The plane count: 1 for codecs that do not split bytes.
        """
        return 1


class Codec(CodecBase):
    """One chunk in, one stored blob out, and back.

    ``planes`` is the byte-plane count recorded in the index (1 for codecs
    that do not split bytes). ``decode_into`` must fill exactly ``out`` and
    raise FormatError for malformed input rather than produce more.
    """

    def for_dtype(self, dtype: np.dtype) -> Codec:
        """The codec a tensor of ``dtype`` is stored with when this one is asked for.

        Itself, unless it has no layout for ``dtype`` (codec 4 then gives codec 1).

        Parameters
        ----------
        dtype : numpy.dtype
            The tensor's dtype.

        Returns
        -------
        Codec
            The codec its chunks are encoded with.
        """
        return self

    @abstractmethod
    def encode(self, chunk: np.ndarray, planes: int, is_float: bool, *,
               dtype: np.dtype | None = None) -> bytes | np.ndarray:
        """The stored bytes of one chunk.

        Parameters
        ----------
        chunk : numpy.ndarray
            The chunk's decoded bytes, a 1-D uint8 array.
        planes : int
            The byte-plane count recorded in the index (see :meth:`planes_for`).
        is_float : bool
            Whether the elements are floats: a codec may tune itself to them.
        dtype : numpy.dtype, optional
            The elements' dtype: a codec that lays planes out per dtype
            (codec 4) needs it, the others ignore it.

        Returns
        -------
        bytes or numpy.ndarray
            What the file stores for the chunk (a raw codec's is ``chunk`` itself).
        """

    @abstractmethod
    def decode_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, *,
                    dtype: np.dtype | None = None) -> None:
        """Decode a chunk's stored bytes into a caller's buffer.

        Parameters
        ----------
        stored : bytes, memoryview or numpy.ndarray
            The chunk's stored bytes, as :meth:`encode` returned them.
        out : numpy.ndarray
            A 1-D uint8 array of the chunk's decoded size, filled exactly.
        planes : int
            The byte-plane count the index records for the chunk.
        dtype : numpy.dtype, optional
            The elements' dtype, as the index records it (see :meth:`encode`).

        Raises
        ------
        FormatError
            ``stored`` is malformed, or does not decode to ``len(out)`` bytes.
        """


class DeltaCodec(CodecBase):
    """A chunk stored as its difference from the base file's chunk.

    Coded against the base's decoded bytes, and decoded onto them.
    """

    @abstractmethod
    def encode_delta(self, chunk: np.ndarray, base: np.ndarray, planes: int, word: int, is_float: bool) -> bytes:
        """The stored bytes of one chunk, against the base's bytes of the same chunk.

        Parameters
        ----------
        chunk : numpy.ndarray
            The chunk's decoded bytes, a 1-D uint8 array.
        base : numpy.ndarray
            The base's decoded bytes of the chunk, 1-D uint8 of the same length.
        planes : int
            The byte-plane count recorded in the index.
        word : int
            The integer width, in bytes, the difference is taken over.
        is_float : bool
            Whether the elements are floats: a codec may tune itself to them.

        Returns
        -------
        bytes
            What the file stores for the chunk (empty when it equals the base's).
        """

    @abstractmethod
    def add_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, word: int) -> None:
        """Turn the base's decoded bytes of a chunk into the chunk's own.

        Parameters
        ----------
        stored : bytes, memoryview or numpy.ndarray
            The chunk's stored bytes, as :meth:`encode_delta` returned them.
        out : numpy.ndarray
            A 1-D uint8 array holding the base's decoded bytes of the chunk,
            overwritten with the chunk's.
        planes : int
            The byte-plane count the index records for the chunk.
        word : int
            The integer width, in bytes, the difference was taken over.

        Raises
        ------
        FormatError
            ``stored`` is malformed, or ``out`` is not whole words.
        """
