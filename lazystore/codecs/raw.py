from __future__ import annotations

import numpy as np

from lazystore.codecs.base import Codec


class Raw(Codec):
    """Stored bytes are the tensor's bytes: mmap-able and zero-copy."""

    id = 0
    name = None

    def encode(self, chunk: np.ndarray, planes: int, is_float: bool, *, dtype: np.dtype | None = None) -> np.ndarray:
        return chunk

    def decode_into(self, stored: bytes | memoryview | np.ndarray, out: np.ndarray, planes: int, *,
                    dtype: np.dtype | None = None) -> None:
        out[:] = np.frombuffer(stored, dtype=np.uint8)


RAW = Raw()
