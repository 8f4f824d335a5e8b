"""Golden bytes of formats 1.2 and 1.3: delta files and their bases (docs/format.md §9.3, §16).

``tests/data/golden_v1_2.lzy`` holds two tensors coded against
``golden_v1_2_base.lzy``: ``w`` (float32, 2 x 4, one chunk per row) whose
first row is unchanged (its chunk stores nothing) and whose second row moved
by a few units in the last place, and ``same`` (int16), unchanged.

``tests/data/golden_v1_3.lzy`` holds the same tensors against the same
base content, coded with codec 3 (a base identified by content), and
``golden_v1_3_base.lzy`` is that base *rewritten after the delta was coded*
(with 128-byte alignment: every byte of it moved, its index checksum is not
the one the delta's member records): the pair pins that a 1.3 delta stays
valid across a rewrite of its base. lazystore writes 1.3 delta files since
format 1.3; the 1.2 pair must go on reading (and, codec 2 being identified
by the base's index checksum, refusing a rewritten base).
"""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest
import xxhash

import lazystore as ls
from lazystore._core.checksum import digest
from tests.paths import DATA
from tests.properties.test_golden import committed, same_zstd
from tests.properties.test_spec_reader import annotated_bytes

GOLDEN_1_2_BASE = DATA / "golden_v1_2_base.lzy"
GOLDEN_1_2 = DATA / "golden_v1_2.lzy"
BASE_SIZE, BASE_SHA256 = 471, "83c26fd80f362cd4125921106588588c1b3ec7689cb92bc655f26095b97bf787"
DELTA_SIZE, DELTA_SHA256 = 528, "50175372b94ddb6aaf632b6de9c507ce3c6acb4cda57b04af7362946f91a6365"
GOLDEN_1_3_BASE = DATA / "golden_v1_3_base.lzy"
GOLDEN_1_3 = DATA / "golden_v1_3.lzy"
BASE_1_3_SIZE, BASE_1_3_SHA256 = 663, "e8bdd779a37f799cae49b03235209f8b6bf12e22b18902f2119778537bf6dd16"
DELTA_1_3_SIZE, DELTA_1_3_SHA256 = 552, "4e37fef809380b60ee21e6ff2f6f073665f053ced260239f0aa2827c6b5e61e9"


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
def test_writer_reproduces_golden_1_2_base_and_now_writes_deltas_as_1_3(golden_files, tmp_path):
    base, delta = golden_1_2_states()
    ls.save(base, tmp_path / GOLDEN_1_2_BASE.name, compression="zstd", chunk_bytes=16)
    ls.save(delta, tmp_path / GOLDEN_1_2.name, compression="zstd", chunk_bytes=16,
            base=tmp_path / GOLDEN_1_2_BASE.name)
    assert (tmp_path / GOLDEN_1_2_BASE.name).read_bytes() == golden_files[0]
    # Since format 1.3 the same save codes against the base's content (codec 3): golden_v1_3.lzy.
    written = (tmp_path / GOLDEN_1_2.name).read_bytes()
    assert written[8:12] == b"\x01\x00\x03\x00" and written != golden_files[1]


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


def test_golden_1_2_refuses_its_base_rewritten_even_with_the_same_content(tmp_path):
    # Codec 2 (format 1.2) identifies its base by index checksum (rule B3): unchanged for 1.2 files.
    shutil.copy(GOLDEN_1_2, tmp_path / GOLDEN_1_2.name)
    base, _ = golden_1_2_states()
    ls.save(base, tmp_path / GOLDEN_1_2_BASE.name, compression="zstd", chunk_bytes=16, alignment=128)
    with ls.open(tmp_path / GOLDEN_1_2.name) as ck, \
            pytest.raises(ls.BaseCheckpointError, match="golden_v1_2_base.*replaced or rewritten"):
        ck["w"]


# -- format 1.3 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def golden_1_3() -> tuple[bytes, bytes]:
    return (committed(GOLDEN_1_3_BASE, BASE_1_3_SIZE, BASE_1_3_SHA256),
            committed(GOLDEN_1_3, DELTA_1_3_SIZE, DELTA_1_3_SHA256))


@same_zstd
def test_writer_reproduces_golden_1_3_bytes(golden_1_3, tmp_path):
    base, delta = golden_1_2_states()
    base_path = tmp_path / GOLDEN_1_3_BASE.name
    ls.save(base, base_path, compression="zstd", chunk_bytes=16)
    ls.save(delta, tmp_path / GOLDEN_1_3.name, compression="zstd", chunk_bytes=16, base=base_path)
    ls.save(base, base_path, compression="zstd", chunk_bytes=16, alignment=128)  # the base rewritten
    assert base_path.read_bytes() == golden_1_3[0]
    assert (tmp_path / GOLDEN_1_3.name).read_bytes() == golden_1_3[1]


def test_golden_1_3_reads_back_exactly_against_its_rewritten_base(golden_1_3):
    _, delta = golden_1_2_states()
    with ls.open(GOLDEN_1_3) as ck:
        assert ck.format_version == (1, 3) and ck.verify() == []
        for name, want in delta.items():
            assert ck[name].dtype == want.dtype and ck[name].tobytes() == want.tobytes()
    assert ls.load(GOLDEN_1_3)["w"].tobytes() == delta["w"].tobytes()


def test_golden_1_3_bytes(golden_1_3):
    base, data = golden_1_3
    states, _ = golden_1_2_states()
    assert base[8:12] == b"\x01\x00\x00\x00"  # the base is an ordinary 1.0 file
    assert data[8:12] == b"\x01\x00\x03\x00" and data[-16:-12] == b"\x01\x00\x03\x00"  # 1.3, both ends
    index_offset, index_length, _ = struct.unpack_from("<QQQ", data, len(data) - 40)
    index = data[index_offset : index_offset + index_length]
    assert struct.unpack_from("<II", index) == (48, 24)  # chunk records carry a third word
    entries = [index[64 + 48 * i : 64 + 48 * (i + 1)] for i in range(2)]
    assert [e[41] for e in entries] == [3, 3]  # codec 3: delta against content, for both tensors
    assert [e[44] for e in entries] == [4, 2]  # planes = itemsize
    records = struct.unpack_from("<9Q", index, 64 + 96 + 8 * 3)  # after two entries and three dims
    w = states["w"]
    # (stored_nbytes, checksum of the stored bytes, xxh3 of the base chunk's decoded bytes)
    assert records[0:3] == (0, digest(b""), xxhash.xxh3_64_intdigest(w[0].tobytes()))
    assert records[3] == 32 and records[5] == xxhash.xxh3_64_intdigest(w[1].tobytes())
    assert records[6:9] == (0, digest(b""), xxhash.xxh3_64_intdigest(states["same"].tobytes()))
    member = json.loads(index[index.index(b"{"):])["__lazystore_base__"]
    _, base_length, base_checksum = struct.unpack_from("<QQQ", base, len(base) - 40)
    # The member records the index of the base as it was coded against; the
    # base was rewritten since, and is identified by content instead.
    assert member["version"] == 1 and member["file"] == "golden_v1_3_base.lzy"
    assert member["index_checksum"] != f"{base_checksum:016x}"


def test_the_annotated_1_3_bytes_of_the_spec_are_the_golden_file(golden_1_3):
    """docs/format.md §16 walks through golden_v1_3.lzy byte by byte."""
    assert annotated_bytes("golden-1-3") == golden_1_3[1]


def test_golden_1_3_refuses_a_base_of_other_content_naming_it(golden_1_3, tmp_path):
    shutil.copy(GOLDEN_1_3, tmp_path / GOLDEN_1_3.name)
    base, delta = golden_1_2_states()
    ls.save({**base, "w": base["w"] + 1}, tmp_path / GOLDEN_1_3_BASE.name, chunk_bytes=16)
    with ls.open(tmp_path / GOLDEN_1_3.name) as ck:
        with pytest.raises(ls.BaseCheckpointError, match="golden_v1_3_base.lzy .*not the content"):
            ck["w"]
        assert ck["same"].tobytes() == delta["same"].tobytes()  # coded against content that is still there


def test_a_1_3_delta_over_a_1_2_delta_survives_the_1_2_file_rewritten(tmp_path):
    # A mixed chain: new (1.3) -> golden_v1_2 (1.2, codec 2) -> its base.
    # The new file is identified with golden_v1_2 by content, so golden_v1_2
    # rewritten as a keyframe of the same content leaves it valid.
    for path in (GOLDEN_1_2, GOLDEN_1_2_BASE):
        shutil.copy(path, tmp_path / path.name)
    _, delta = golden_1_2_states()
    newer = {**delta, "w": delta["w"].copy()}
    newer["w"][1, 0] = np.nextafter(newer["w"][1, 0], np.float32(9))  # row 0 unchanged: a delta pays
    ls.save(newer, tmp_path / "new.lzy", chunk_bytes=16, base=tmp_path / GOLDEN_1_2.name)
    with ls.open(tmp_path / "new.lzy") as ck:
        assert ck.format_version == (1, 3) and ck.info("w").compression == "delta"
    ls.save(delta, tmp_path / GOLDEN_1_2.name, chunk_bytes=16)  # the 1.2 delta, now a keyframe
    (tmp_path / GOLDEN_1_2_BASE.name).unlink()
    with ls.open(tmp_path / "new.lzy") as ck:
        assert ck.verify() == [] and all(ck[k].tobytes() == newer[k].tobytes() for k in newer)
