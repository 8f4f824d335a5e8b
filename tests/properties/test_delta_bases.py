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


@pytest.mark.slow
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


# -- a base identified by content (format 1.3) ------------------------------------------------------

REWRITES = {  # the same content, stored another way (each keeps the 4-chunk grid, rule B2)
    "raw-aligned-16": {"chunk_bytes": 1024, "alignment": 16},  # every tensor byte moved
    "zstd": {"chunk_bytes": 1024, "compression": "zstd"},
}


@pytest.mark.parametrize("rewritten", [0, 1], ids=["keyframe", "middle"])
@pytest.mark.parametrize("how", [*REWRITES, "delta-of-another"])
def test_a_base_rewritten_with_the_same_content_leaves_every_read_intact(chain, tmp_path, rewritten, how):
    paths = [tmp_path / p.name for p in chain]
    for src, dst in zip(chain, paths):
        shutil.copyfile(src, dst)
    content = W if rewritten == 0 else _nudged(1)
    before = paths[rewritten].read_bytes()
    if how == "delta-of-another":  # as a series that rewrites older checkpoints against newer ones does
        ls.save({"w": _nudged(7)}, tmp_path / "other.lzy", chunk_bytes=1024)
        ls.save({"w": content}, paths[rewritten], base=tmp_path / "other.lzy")
        with ls.open(paths[rewritten]) as ck:
            assert ck.info("w").compression == "delta" and ck.base.endswith("other.lzy")
    else:
        ls.save({"w": content}, paths[rewritten], **REWRITES[how])
    assert paths[rewritten].read_bytes() != before
    for read, mmap in _reads(paths[-1]):
        want = _nudged(2)[:, 3] if read.__name__ == "part" else _nudged(2)
        assert read(mmap).tobytes() == want.tobytes(), (read.__name__, mmap)
        with ls.open(paths[-1], mmap=mmap) as ck:
            assert ck.verify() == []


@pytest.mark.parametrize("changed", [0, 1], ids=["keyframe", "middle"])
def test_a_base_chunk_of_other_content_fails_the_reads_that_use_it_naming_the_base(chain, tmp_path, changed):
    paths = [tmp_path / p.name for p in chain]
    for src, dst in zip(chain, paths):
        shutil.copyfile(src, dst)
    content = (W if changed == 0 else _nudged(1)).copy()
    content[9, 5] = -content[9, 5]  # row 9: chunk 1 of 4 (8 rows each); stored anew, checksums valid
    ls.save({"w": content}, paths[changed], chunk_bytes=1024)
    for read, mmap in _reads(paths[-1]):  # each reads chunk 1
        with pytest.raises(ls.BaseCheckpointError, match=rf"{paths[changed].name} .*not the content"):
            read(mmap)
    for mmap in (True, False):
        with ls.open(paths[-1], mmap=mmap) as ck:
            with pytest.raises(ls.BaseCheckpointError, match=paths[changed].name):
                ck.verify()
            # The chunks whose base content is unchanged still read, and exactly.
            assert ck.get_slice("w")[0:8].tobytes() == _nudged(2)[0:8].tobytes()
            assert ck.get_slice("w")[16:32].tobytes() == _nudged(2)[16:32].tobytes()
