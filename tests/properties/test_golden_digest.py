"""Golden bytes of format 1.4: chunk digests (docs/format.md §10.1).

``tests/data/golden_v1_4_digest.lzy`` was generated once, by
``ls.save(golden_digest_tensors(), path, compression="zstd", digest="blake3",
metadata={"format": "1.4"})`` (libzstd 1.5.7), and committed: a raw tensor
``w`` and a zstd tensor ``zeros``, each one chunk, each with its BLAKE3
digest in a 56-byte chunk record. Never regenerate it to make a test pass
(see tests/properties/test_golden.py).
"""

from __future__ import annotations

import json
import struct

import numpy as np
import xxhash
from blake3 import blake3

import lazystore as ls
from tests.paths import DATA
from tests.properties.test_golden import committed, same_zstd
from tests.properties.test_spec_reader import SpecFile, assert_same, spec_load

GOLDEN_1_4 = DATA / "golden_v1_4_digest.lzy"
SIZE, SHA256 = 682, "d5b09726b9f1def5b7b1adc7f060400090b470ac179f2a6494344b82ede7329b"
METADATA = {"format": "1.4"}
INDEX_OFFSET, INDEX_LENGTH = 256, 386


def golden_digest_tensors() -> dict[str, np.ndarray]:
    return {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "zeros": np.zeros((64, 4), np.float32)}


@same_zstd
def test_writer_reproduces_the_golden_digest_file(tmp_path):
    golden = committed(GOLDEN_1_4, SIZE, SHA256)
    ls.save(golden_digest_tensors(), tmp_path / "again.lzy", compression="zstd", digest="blake3", metadata=METADATA)
    assert (tmp_path / "again.lzy").read_bytes() == golden
    with ls.Writer(tmp_path / "writer.lzy", compression="zstd", digest="blake3", metadata=METADATA) as w:
        for name, arr in golden_digest_tensors().items():
            w.add(name, arr)
    assert (tmp_path / "writer.lzy").read_bytes() == golden


def test_golden_digest_file_reads_back_exactly():
    with ls.open(GOLDEN_1_4, verify=True) as ck:
        assert ck.format_version == (1, 4) and ck.metadata == METADATA
        assert ck.system_metadata == {"__lazystore_digest__": {"version": 1, "algorithm": "blake3"}}
        assert ck.verify() == []
        assert_same({n: ck[n] for n in ck}, golden_digest_tensors())
        assert [ck.info(n).compression for n in ck] == [None, "zstd"]
    assert_same(ls.load(GOLDEN_1_4), golden_digest_tensors())


def test_golden_digest_bytes():
    golden = committed(GOLDEN_1_4, SIZE, SHA256)
    assert golden[8:12] == golden[-16:-12] == b"\x01\x00\x04\x00"  # 1.4 in the preamble and the trailer
    index = golden[INDEX_OFFSET : INDEX_OFFSET + INDEX_LENGTH]
    assert struct.unpack_from("<QQ", golden, SIZE - 40) == (INDEX_OFFSET, INDEX_LENGTH)
    # entry size 48, chunk record size 56 (§11.4), 2 tensors, 4 dims, 2 chunks
    assert struct.unpack_from("<IIQQQ", index, 0) == (48, 56, 2, 4, 2)
    records = 64 + 2 * 48 + 4 * 8
    chunks = [(64, 24), (128, 92)]  # (offset, stored length) of w's chunk and zeros' chunk
    for j, (at, n) in enumerate(chunks):
        stored, checksum, base_checksum = struct.unpack_from("<QQQ", index, records + 56 * j)
        digest = index[records + 56 * j + 24 : records + 56 * j + 56]
        blob = golden[at : at + n]
        assert (stored, checksum, base_checksum) == (n, xxhash.xxh3_64_intdigest(blob), 0)
        assert digest == blake3(blob).digest()  # rule G2: over the stored bytes
    assert golden[64:88] == np.arange(6, dtype="<f4").tobytes()
    assert golden[128:144] == struct.pack("<4I", 19, 19, 19, 19)  # zeros: 4 plane lengths, then 4 zstd frames
    meta = json.loads(index[records + 2 * 56 + len(b"w\0zeros\0") :])
    assert meta == {"format": "1.4", "__lazystore_digest__": {"version": 1, "algorithm": "blake3"}}


def test_the_spec_reader_decodes_it_and_checks_its_digests():
    tensors, metadata = spec_load(GOLDEN_1_4)
    assert_same(tensors, golden_digest_tensors())
    with SpecFile(GOLDEN_1_4) as f:
        assert f.version == (1, 4) and f.digest == "blake3"
        f.verify()
    assert metadata["__lazystore_digest__"]["algorithm"] == "blake3"

