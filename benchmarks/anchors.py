"""Each tool's way of saving, loading and reading, wrapped as plain functions.

lazystore and the tools users would otherwise pick (safetensors' numpy API,
torch, numpy .npz, a plain file) are called the way their documentation
shows, so a measure composes these instead of repeating tool code. torch is
imported on first use: it takes seconds to import.
"""

from __future__ import annotations

import gc
import mmap
import os

import numpy as np
import safetensors.numpy
from safetensors import safe_open

import lazystore as ls


def fsync_file(path) -> None:
    """Make a file's data durable (what lazystore's save does for its own file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable(save):
    """``save`` followed by fsync of the file it wrote."""

    def save_and_fsync(tensors, path) -> None:
        save(tensors, path)
        fsync_file(path)

    return save_and_fsync


def _bytes(array) -> np.ndarray:
    """An array's bytes as flat uint8 (torch tensors too, zero-copy)."""
    return np.asarray(array).reshape(-1).view(np.uint8)


def touch_pages(arrays) -> int:
    """Read one byte of every memory page of every array, so all of it is
    resident: loaders that map the file (lazily) pay their page faults here,
    ones that already copied everything pay next to nothing."""
    total = 0
    for array in arrays:
        flat = _bytes(array)
        total += int(flat[:: mmap.PAGESIZE].sum()) + int(flat[-1:].sum())
    return total


def write_pages(arrays) -> None:
    """Write one byte of every page (its own value): copy-on-write pages get
    their private copy here, as they would when training updates weights."""
    for array in arrays:
        flat = _bytes(array)
        for pages in (flat[:: mmap.PAGESIZE], flat[-1:]):
            pages[...] = pages.copy()


# -- lazystore ------------------------------------------------------------------

def ls_save(tensors, path, compression=None) -> None:
    ls.save(tensors, path, compression=compression)


def ls_load(path) -> dict:
    # safetensors checks nothing: compared like with like (the checked
    # default's cost is measured in benchmarks/verify_load.py).
    return ls.load(path, verify=False)


def ls_read_one(path, name) -> float:
    """Open, read one tensor in full (its sum touches every byte), close."""
    with ls.open(path) as ck:
        return float(ck[name].sum())


def ls_read_each(path) -> list:
    """Open, read every tensor in turn by name (``ck[name]``), close."""
    with ls.open(path) as ck:
        return [ck[name] for name in ck]


def ls_verify(path) -> list:
    with ls.open(path) as ck:
        return ck.verify()


# -- safetensors (numpy API) ----------------------------------------------------

def st_save(tensors, path) -> None:
    safetensors.numpy.save_file(tensors, path)


def st_load(path) -> dict:
    return safetensors.numpy.load_file(path)


def st_read_one(path, name) -> float:
    with safe_open(path, "np") as f:
        return float(f.get_tensor(name).sum())


def st_read_each(path) -> list:
    with safe_open(path, "np") as f:
        return [f.get_tensor(name) for name in f.keys()]


# -- torch (CPU) -------------------------------------------------------------------

def torch_save(tensors, path) -> None:
    import torch

    torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, path)


def torch_load(path, mmap: bool = False) -> dict:
    import torch

    return torch.load(path, mmap=mmap, weights_only=True)


def torch_read_one(path, name) -> float:
    """torch's lazy route: map the file, read one tensor."""
    return float(torch_load(path, mmap=True)[name].sum())


# -- numpy .npz (uncompressed) -------------------------------------------------------

def npz_save(tensors, path) -> None:
    with open(path, "wb") as f:  # a file object: savez would append ".npz" to a name
        np.savez(f, **tensors)


def npz_load(path) -> dict:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


# -- a plain file of the same bytes ----------------------------------------------------

def plain_write(tensors, path) -> None:
    """The tensors' bytes back to back, nothing else."""
    with open(path, "wb", buffering=0) as f:
        for array in tensors.values():
            data = memoryview(np.ascontiguousarray(array)).cast("B")
            while data:
                data = data[f.write(data):]


def plain_read_into(path, buf: np.ndarray) -> np.ndarray:
    """Read a whole file into a preallocated buffer of its size."""
    view = memoryview(buf).cast("B")
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < len(view):
            n = f.readinto(view[done:])
            if not n:
                raise EOFError(f"{path} is shorter than the buffer")
            done += n
    return buf


def evict(*paths) -> None:
    """Drop the files' pages from the page cache (none may be mapped: the
    loads of the previous call are collected first)."""
    gc.collect()
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
