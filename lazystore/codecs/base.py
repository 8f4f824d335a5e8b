from __future__ import annotations

from typing import ClassVar

import numpy as np


class Codec:
    """One chunk in, one stored blob out, and back.

    ``planes`` is the byte-plane count recorded in the index (1 for codecs
    that do not split bytes). ``decode_into`` must fill exactly ``out`` and
    raise FormatError for malformed input rather than produce more.
    """

    id: ClassVar[int]
    name: ClassVar[str | None]

    def planes_for(self, itemsize: int) -> int:
        return 1

    def encode(self, chunk: np.ndarray, planes: int, is_float: bool):
        """Stored bytes for ``chunk`` (a 1-D uint8 array); ``is_float`` lets
        a codec tune itself to float data."""
        raise NotImplementedError

    def decode_into(self, stored, out: np.ndarray, planes: int) -> None:
        """Decode ``stored`` into ``out`` (a 1-D uint8 array of the chunk's size)."""
        raise NotImplementedError
