"""Every byte that feeds a decode is checked, down a chain of bases.

A chain: a raw keyframe, a delta of it, a delta of that. Stored bytes of
tensor ``w`` all over each file of the chain (every 3rd of a delta's,
every 17th of the keyframe's and the ends of its chunks) are flipped in
turn. Reading ``w`` from the top file must then fail with
a ChecksumError, whichever way it is read (mapped or fetched; ``ck[...]``,
``get_slice`` or ``load``: one way per flip, in turn), and ``verify()``
must name it: never a value decoded from damaged bytes."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import lazystore as ls

W = (np.arange(1024, dtype=np.float32) / 3).reshape(32, 32)


def _nudged(ulps: int) -> np.ndarray:
    """W, every element ``ulps`` units in the last place up: a delta that pays."""
    return (W.view(np.uint32) + np.uint32(ulps)).view(np.float32)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chain")
    paths = [folder / f"{n}.lzy" for n in "abc"]
    ls.save({"w": W}, paths[0], chunk_bytes=1024)  # raw, 4 chunks
    ls.save({"w": _nudged(1)}, paths[1], base=paths[0])
    ls.save({"w": _nudged(2)}, paths[2], base=paths[1])
    for p in paths[1:]:
        with ls.open(p) as ck:
            assert ck.info("w").compression == "delta"
    return paths


def _reads(top):
    def item(mmap):
        with ls.open(top, mmap=mmap) as ck:
            return ck["w"]

    def part(mmap):
        with ls.open(top, mmap=mmap) as ck:
            return ck.get_slice("w")[:, 3]

    def load(mmap):
        with ls.open(top, mmap=mmap) as ck:
            return ck.load()["w"]

    return [(read, mmap) for read in (item, part, load) for mmap in (True, False)]


@pytest.mark.parametrize("damaged", [0, 1, 2], ids=["keyframe", "middle", "top"])
def test_every_flipped_byte_of_the_chain_fails_every_read(chain, tmp_path, damaged):
    paths = [tmp_path / p.name for p in chain]
    for src, dst in zip(chain, paths):
        shutil.copyfile(src, dst)
    with ls.open(paths[damaged]) as ck:
        info = ck.info("w")
    assert info.stored_nbytes > 0
    target = paths[damaged]
    reads = _reads(paths[-1])
    original = target.read_bytes()
    # Every 3rd byte of a delta's; of the raw keyframe's 4 KiB every 17th
    # and both ends of each of its chunks (each chunk is hashed whole).
    every = 17 if damaged == 0 else 3
    ends = [info.offset + k * 1024 + d for k in range(4) for d in (0, 1023)] if damaged == 0 else []
    for at in sorted({*range(info.offset, info.offset + info.stored_nbytes, every), *ends}):
        damaged_bytes = bytearray(original)
        damaged_bytes[at] ^= 0x04
        target.write_bytes(damaged_bytes)
        read, mmap = reads[at % len(reads)]  # each way of reading, in turn
        with pytest.raises(ls.ChecksumError):
            read(mmap)
        with ls.open(paths[-1], mmap=mmap) as ck:
            assert ck.verify() == ["w"], at
    target.write_bytes(original)
    assert ls.load(paths[-1])["w"].tobytes() == _nudged(2).tobytes()
    assert os.path.getsize(target) == len(original)
