"""Loaded arrays -> torch tensors on a device, through pinned staging buffers.

A copy from pageable host memory (a mapped file, a decoded array) to a GPU
is slow and synchronous: the driver bounces it through a pinned buffer of
its own, one piece at a time. Loaders built for GPUs (fastsafetensors,
Run:ai's model streamer) instead fill page-locked buffers themselves and
let the copy engine drain one while the CPU fills the other. That is what
:class:`Placement` does on a CUDA device:

- two pinned buffers of at most :data:`STAGING_BYTES` each (from torch's
  caching host allocator, so a second load reuses them);
- the pool's threads copy tensors' bytes into the current buffer, and the
  copies into the tensors' device memory are queued on a stream of their
  own (``non_blocking``), so they run while the CPU fills the next buffer;
- a buffer is refilled only after an event says the GPU has read it;
- tensors bigger than a buffer go in pieces.

Tensors are handed out as soon as their copies are queued; the with-block
waits for every copy on exit, so what a loader returns is ready to use on
any stream. On the CPU a tensor shares the array's memory; other devices
(meta, and accelerators other than CUDA) take ``Tensor.to``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lazystore._core import parallel, torch_arrays

# Each of the two pinned buffers. Large enough that a copy's fixed cost (a
# few microseconds to queue it) is small beside its bytes, small enough that
# pinning them (page-locking is slow) stays cheap.
STAGING_BYTES = 64 << 20


class Placement:
    """``with Placement(device, total_bytes) as place: t = place.tensor(arr)``.

    ``total_bytes``, when known, caps the staging buffers' size for small
    loads. Leaving the block waits until every tensor has arrived; an error
    inside it still waits, so no copy outlives its buffers.
    """

    def __init__(self, dev, total_bytes: int | None = None):
        self._dev = dev  # a torch.device (so torch is imported), or None: the CPU
        self._staging = _Staging(torch_arrays.require(), dev, total_bytes) if _is_cuda(dev) else None

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, *exc) -> None:
        if self._staging is not None:
            self._staging.wait()

    def tensor(self, arr: np.ndarray):
        """The torch tensor of ``arr`` on the device (for CUDA: its copy may
        still be under way until the with-block ends)."""
        if self._staging is not None:
            return self._staging.put(arr)
        return torch_arrays.on_device(arr, self._dev)


def _is_cuda(dev) -> bool:
    return dev is not None and dev.type == "cuda"


class _Staging:
    """Two pinned buffers and a copy stream feeding one CUDA device.

    A buffer is planned first (which bytes of which arrays go where in it),
    then filled by the shared pool's threads at once: one thread copying
    from a mapped file or a decoded array into pinned memory runs well
    under what a PCIe or NVLink copy engine drains."""

    def __init__(self, torch, dev, total_bytes: int | None):
        self._torch = torch
        self._dev = dev
        size = STAGING_BYTES if total_bytes is None else max(1, min(STAGING_BYTES, total_bytes))
        # device="cpu": a default device set by the caller (torch.set_default_device) must not move them
        self._pinned = [torch.empty(size, dtype=torch.uint8, device="cpu", pin_memory=True) for _ in range(2)]
        self._host = [p.numpy() for p in self._pinned]  # the same pinned memory, for numpy copies
        self._drained = [None, None]  # the event after the last copy out of each buffer
        self._current = 0
        self._used = 0
        # (source bytes, offset in buffer, device bytes: a torch tensor, Any as torch is imported lazily)
        self._planned: list[tuple[np.ndarray, int, Any]] = []
        self._stream = torch.cuda.Stream(dev)
        # Device memory handed out below may have been freed by work still
        # queued on the caller's stream: copies start after that work.
        self._stream.wait_stream(torch.cuda.current_stream(dev))

    def put(self, arr: np.ndarray):
        torch = self._torch
        out = torch.empty(arr.shape, dtype=torch_arrays.torch_dtype_of(arr.dtype), device=self._dev)
        if arr.nbytes == 0:
            return out
        src = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        dst = out.reshape(-1).view(torch.uint8)
        size = len(self._host[0])
        pos = 0
        while pos < src.size:
            n = min(src.size - pos, size - self._used)
            self._planned.append((src[pos:pos + n], self._used, dst[pos:pos + n]))
            self._used += n
            pos += n
            if self._used == size:
                self._flush()
        return out

    def _flush(self) -> None:
        """Fill the current buffer as planned, queue its copies to the
        device, and move to the other buffer once the GPU has read it."""
        if not self._planned:
            return
        host = self._host[self._current]
        pieces = [(src[i:i + FILL_PIECE_BYTES], at + i) for src, at, _ in self._planned
                  for i in range(0, src.size, FILL_PIECE_BYTES)]
        parallel.run_all(lambda piece: _fill(host, *piece), pieces)
        torch = self._torch
        pinned = self._pinned[self._current]
        with torch.cuda.stream(self._stream):
            for src, at, dst in self._planned:
                dst.copy_(pinned[at:at + src.size], non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        self._drained[self._current] = event
        self._planned = []
        self._current ^= 1
        self._used = 0
        pending = self._drained[self._current]
        if pending is not None:
            pending.synchronize()

    def wait(self) -> None:
        self._flush()
        self._stream.synchronize()


# A thread's share of a buffer fill: big enough that handing it to a thread
# costs little beside the copy, small enough to spread a buffer over cores.
FILL_PIECE_BYTES = 4 << 20


def _fill(host: np.ndarray, src: np.ndarray, at: int) -> None:
    host[at:at + src.size] = src  # numpy releases the GIL for the copy
