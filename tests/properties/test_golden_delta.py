"""Golden bytes of format 1.2: a delta file and its base (docs/format.md §9.3, §16).

``tests/data/golden_v1_2.lzy`` holds two tensors coded against
``golden_v1_2_base.lzy``: ``w`` (float32, 2 x 4, one chunk per row) whose
first row is unchanged (its chunk stores nothing) and whose second row moved
by a few units in the last place, and ``same`` (int16), unchanged.
"""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest

import lazystore as ls
from lazystore._core.checksum import digest
from tests.paths import DATA
from tests.properties.test_golden import committed, same_zstd

GOLDEN_1_2_BASE = DATA / "golden_v1_2_base.lzy"
GOLDEN_1_2 = DATA / "golden_v1_2.lzy"
BASE_SIZE, BASE_SHA256 = 471, "83c26fd80f362cd4125921106588588c1b3ec7689cb92bc655f26095b97bf787"
DELTA_SIZE, DELTA_SHA256 = 528, "50175372b94ddb6aaf632b6de9c507ce3c6acb4cda57b04af7362946f91a6365"


def golden_1_2_states() -> tuple[dict, dict]:
    w = np.arange(8, dtype=np.float32).reshape(2, 4) * 0.25 + 1
    moved = w.copy()
    moved[1] = (w[1].view(np.uint32) + np.array([1, -1, 3, 0], np.int64).astype(np.uint32)).view(np.float32)
    same = np.array([1, 2, 3], np.int16)
    return {"w": w, "same": same}, {"w": moved, "same": same}


@pytest.fixture(scope="module")
def golden_files() -> tuple[bytes, bytes]:
    return committed(GOLDEN_1_2_BASE, BASE_SIZE, BASE_SHA256), committed(GOLDEN_1_2, DELTA_SIZE, DELTA_SHA256)


@same_zstd
def test_writer_reproduces_golden_1_2_bytes(golden_files, tmp_path):
    base, delta = golden_1_2_states()
    ls.save(base, tmp_path / GOLDEN_1_2_BASE.name, compression="zstd", chunk_bytes=16)
    ls.save(delta, tmp_path / GOLDEN_1_2.name, compression="zstd", chunk_bytes=16,
            base=tmp_path / GOLDEN_1_2_BASE.name)
    assert (tmp_path / GOLDEN_1_2_BASE.name).read_bytes() == golden_files[0]
    assert (tmp_path / GOLDEN_1_2.name).read_bytes() == golden_files[1]


def test_golden_1_2_reads_back_exactly(golden_files):
    _, delta = golden_1_2_states()
    with ls.open(GOLDEN_1_2) as ck:
        assert ck.format_version == (1, 2) and ck.verify() == []
        for name, want in delta.items():
            assert ck[name].dtype == want.dtype and ck[name].tobytes() == want.tobytes()


def test_golden_1_2_bytes(golden_files):
    base, data = golden_files
    assert base[8:12] == b"\x01\x00\x00\x00"  # the base is an ordinary 1.0 file
    assert data[8:12] == b"\x01\x00\x02\x00" and data[-16:-12] == b"\x01\x00\x02\x00"  # 1.2, both ends
    index_offset, index_length, _ = struct.unpack_from("<QQQ", data, len(data) - 40)
    index = data[index_offset : index_offset + index_length]
    entries = [index[64 + 48 * i : 64 + 48 * (i + 1)] for i in range(2)]
    assert [e[41] for e in entries] == [2, 2]  # codec 2: delta, for both tensors
    assert [e[44] for e in entries] == [4, 2]  # planes = itemsize
    chunks = struct.unpack_from("<6Q", index, 64 + 96 + 8 * 3)  # after two entries and three dims
    # w's row 0 is unchanged: stored as nothing, with the checksum of nothing.
    assert chunks[0] == 0 and chunks[1] == digest(b"")
    assert chunks[2] > 0 and chunks[4] == 0  # row 1 is a delta; "same" stores nothing
    member = json.loads(index[index.index(b"{"):])["__lazystore_base__"]
    base_offset, base_length, base_checksum = struct.unpack_from("<QQQ", base, len(base) - 40)
    assert member == {"version": 1, "file": "golden_v1_2_base.lzy", "index_checksum": f"{base_checksum:016x}",
                      "index_length": base_length}


def test_golden_1_2_needs_its_base(golden_files, tmp_path):
    shutil.copy(GOLDEN_1_2, tmp_path / GOLDEN_1_2.name)
    with ls.open(tmp_path / GOLDEN_1_2.name) as ck, pytest.raises(ls.BaseCheckpointError, match="golden_v1_2_base"):
        ck["w"]
