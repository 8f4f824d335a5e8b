"""Laziness proven with numbers: a source that records every byte range read.

The source here is in-memory and unmapped, like the remote sources to come,
so every byte lazystore touches goes through ``read``/``read_into``.
"""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore._native import layout as fmt
from lazystore.sources import ByteSource
from lazystore.views.checkpoint import CheckpointView


class RecordingSource(ByteSource):
    def __init__(self, data: bytes):
        self._data = data
        self.size = len(data)
        self.name = "<memory>"
        self.reads: list[tuple[int, int]] = []

    def read_into(self, offset: int, out) -> None:
        out = memoryview(out).cast("B")
        self._check_range(offset, offset + len(out))
        self.reads.append((offset, offset + len(out)))
        out[:] = self._data[offset : offset + len(out)]

    @property
    def bytes_read(self) -> int:
        return sum(b - a for a, b in self.reads)


def _checkpoint(tmp_path, n_tensors: int, compression=None, **options) -> tuple[bytes, dict]:
    rng = np.random.default_rng(0)
    tensors = {f"layer.{i}.weight": np.round(rng.standard_normal((256, 64)), 1).astype(np.float32)
               for i in range(n_tensors)}
    path = tmp_path / "ck.lzy"
    ls.save(tensors, path, compression=compression, **options)
    return path.read_bytes(), tensors


def test_open_reads_only_the_tail_in_one_read(tmp_path):
    data, _ = _checkpoint(tmp_path, 32)
    src = RecordingSource(data)
    CheckpointView(src)
    assert len(src.reads) == 1
    start, stop = src.reads[0]
    assert stop == len(data) and stop - start <= fmt.TAIL_READ_BYTES < len(data)


def test_a_large_index_takes_exactly_two_reads(tmp_path):
    # 3,000 tensors make an index far bigger than the 64 KiB tail read.
    path = tmp_path / "many.lzy"
    ls.save({f"t{i:05d}": np.zeros(2, np.float32) for i in range(3000)}, path)
    data = path.read_bytes()
    src = RecordingSource(data)
    ck = CheckpointView(src)
    assert len(ck) == 3000
    assert len(src.reads) == 2
    index_len = int.from_bytes(data[-32:-24], "little")
    assert index_len > fmt.TAIL_READ_BYTES
    assert src.reads[1][1] - src.reads[1][0] == index_len


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_reading_one_tensor_touches_only_its_bytes(tmp_path, compression):
    data, tensors = _checkpoint(tmp_path, 16, compression)
    src = RecordingSource(data)
    ck = CheckpointView(src)
    src.reads.clear()
    info = ck.info("layer.7.weight")
    assert np.array_equal(ck["layer.7.weight"], tensors["layer.7.weight"])
    assert src.bytes_read == info.stored_nbytes
    assert all(info.offset <= a and b <= info.offset + info.stored_nbytes for a, b in src.reads)


def test_a_compressed_slice_fetches_only_the_chunks_it_needs(tmp_path):
    data, tensors = _checkpoint(tmp_path, 2, "zstd", chunk_bytes=4096)  # 16 rows per chunk
    src = RecordingSource(data)
    ck = CheckpointView(src)
    assert ck.info("layer.1.weight").compression == "zstd"
    src.reads.clear()
    rows = ck.get_slice("layer.1.weight")[20:40]  # rows 20-39: chunks 1 and 2 of 16
    assert np.array_equal(rows, tensors["layer.1.weight"][20:40])
    assert len(src.reads) == 2
    whole = ck.info("layer.1.weight").stored_nbytes
    assert src.bytes_read < whole / 4


def test_verify_reads_every_byte_once(tmp_path):
    data, _ = _checkpoint(tmp_path, 8, "zstd")
    src = RecordingSource(data)
    ck = CheckpointView(src)
    src.reads.clear()
    assert ck.verify() == []
    covered = np.zeros(len(data), dtype=np.int64)
    for a, b in src.reads:
        covered[a:b] += 1
    index_offset = int.from_bytes(data[-40:-32], "little")
    # Preamble, padding and every chunk: each byte before the index exactly once.
    assert (covered[:index_offset] == 1).all()


def test_load_from_an_unmapped_source_decodes_into_owned_arrays(tmp_path):
    data, tensors = _checkpoint(tmp_path, 4)
    ck = CheckpointView(RecordingSource(data))
    loaded = ck.load()
    for name, arr in tensors.items():
        assert np.array_equal(loaded[name], arr)
        loaded[name][...] = -1  # writable, and private to this dict
    assert all(np.array_equal(ck[name], arr) for name, arr in tensors.items())
