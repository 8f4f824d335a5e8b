"""Per-thread scratch buffers, reused from call to call.

Decoding allocates a temporary per chunk (Blosc's input frame, a delta
chunk's zigzag words); a fresh array each time costs an allocation and,
past malloc's mmap threshold, page faults on every chunk. Each thread keeps
one buffer per purpose, grown when a larger one is asked for, never shrunk.
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()


def scratch(purpose: str, nbytes: int) -> np.ndarray:
    """This thread's uint8 buffer for ``purpose``, ``nbytes`` long. Its
    contents are garbage, and it is valid until this thread asks for the
    same purpose again (two purposes never share memory)."""
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = {}
    buf = buffers.get(purpose)
    if buf is None or len(buf) < nbytes:
        buf = buffers[purpose] = np.empty(nbytes, dtype=np.uint8)
    return buf[:nbytes]
