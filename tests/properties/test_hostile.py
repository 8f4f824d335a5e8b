"""Hostile files: valid checksums, lying contents.

Each case writes a valid file, decodes its index with a small parser of its
own (the format's fixed structures come from ``lazystore.format``), patches
fields, re-encodes the index and recomputes the index checksum (and length)
in the trailer, so the checksum cannot be what catches the lie: the
validation of what the index *says* must.

Every hostile file must be rejected with ``ls.FormatError``, never with an
IndexError, struct.error, MemoryError, OverflowError or anything else, and
without allocating memory sized by the file's claims (tracemalloc peak,
which numpy reports its buffers to, stays far below what the claims imply).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tracemalloc
from dataclasses import dataclass, field

import numpy as np
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore._native.layout import (
    CHUNK_DTYPE,
    ENTRY_DTYPE,
    INDEX_HEADER,
    MAGIC,
    RECORD_DTYPES,
    TRAILER,
)
from tests.hypothesis_profiles import examples
from tests.paths import REPO

ROOT = REPO
BANNED = (IndexError, struct.error, MemoryError, OverflowError)
PEAK_LIMIT = 50 << 20
HEADER_FIELDS = (
    "entry_size", "chunk_record_size", "tensor_count", "dims_count", "chunk_count",
    "keys_nbytes", "metadata_nbytes", "alignment", "reserved1", "reserved2",
)
TRAILER_FIELDS = ("index_offset", "index_length", "checksum", "major", "minor", "reserved", "magic")
U64_MAX = 2**64 - 1

# --- crafting ---------------------------------------------------------------------


@dataclass
class Parts:
    """A decoded file: everything before the index, the index's sections, and
    overrides applied when it is re-encoded."""

    data: bytearray  # preamble, tensors, padding: every byte before the index
    entries: np.ndarray  # ENTRY_DTYPE
    dims: np.ndarray  # uint64
    chunks: np.ndarray  # CHUNK_DTYPE; WIDE_CHUNK_DTYPE in a delta file (1.3); wider with digests (1.4)
    keys: bytes
    metadata: bytes
    alignment: int
    header: dict = field(default_factory=dict)  # INDEX_HEADER fields to force
    trailer: dict = field(default_factory=dict)  # TRAILER fields to force

    @classmethod
    def parse(cls, blob: bytes) -> Parts:
        values = TRAILER.unpack_from(blob, len(blob) - TRAILER.size)
        t = dict(zip(TRAILER_FIELDS, values))
        index = blob[t["index_offset"] : t["index_offset"] + t["index_length"]]
        assert xxhash.xxh3_64_intdigest(index) == t["checksum"]
        h = dict(zip(HEADER_FIELDS, INDEX_HEADER.unpack_from(index, 0)))
        records = {d.itemsize: d for d in RECORD_DTYPES}
        assert h["entry_size"] == ENTRY_DTYPE.itemsize and h["chunk_record_size"] in records
        pos = INDEX_HEADER.size

        def take(n: int) -> bytes:
            nonlocal pos
            pos += n
            return index[pos - n : pos]

        entries = np.frombuffer(take(h["tensor_count"] * ENTRY_DTYPE.itemsize), ENTRY_DTYPE).copy()
        dims = np.frombuffer(take(h["dims_count"] * 8), "<u8").copy()
        record = records[h["chunk_record_size"]]
        chunks = np.frombuffer(take(h["chunk_count"] * record.itemsize), record).copy()
        keys = take(h["keys_nbytes"])
        metadata = take(h["metadata_nbytes"])
        assert pos == len(index)
        return cls(bytearray(blob[: t["index_offset"]]), entries, dims, chunks, keys, metadata, h["alignment"])

    def index_bytes(self) -> bytes:
        h = dict(
            entry_size=ENTRY_DTYPE.itemsize, chunk_record_size=self.chunks.dtype.itemsize,
            tensor_count=len(self.entries), dims_count=len(self.dims), chunk_count=len(self.chunks),
            keys_nbytes=len(self.keys), metadata_nbytes=len(self.metadata),
            alignment=self.alignment, reserved1=0, reserved2=0,
        )
        h.update(self.header)
        return b"".join([
            INDEX_HEADER.pack(*(h[f] for f in HEADER_FIELDS)),
            self.entries.astype(ENTRY_DTYPE).tobytes(),
            np.asarray(self.dims, dtype="<u8").tobytes(),
            self.chunks.tobytes(),
            self.keys,
            self.metadata,
        ])

    def build(self) -> bytes:
        index = self.index_bytes()
        t = dict(
            index_offset=len(self.data), index_length=len(index),
            checksum=xxhash.xxh3_64_intdigest(index), major=1, minor=0, reserved=0, magic=MAGIC,
        )
        t.update(self.trailer)
        return bytes(self.data) + index + TRAILER.pack(*(t[f] for f in TRAILER_FIELDS))

    # -- helpers for cases --

    def set_dims(self, pos: int, shape) -> None:
        """Replace one tensor's shape (its ndim too), keeping the others'."""
        ndim = self.entries["ndim"].astype(int)
        start = int(ndim[:pos].sum())
        self.dims = np.concatenate([
            self.dims[:start], np.array(shape, dtype=np.uint64), self.dims[start + ndim[pos] :]
        ])
        self.entries["ndim"][pos] = len(shape)

    def chunk_slice(self, pos: int) -> slice:
        counts = self.entries["chunk_count"].astype(int)
        start = int(counts[:pos].sum())
        return slice(start, start + counts[pos])

    def chunk_offset(self, global_chunk: int) -> int:
        counts = self.entries["chunk_count"].astype(int)
        pos = int(np.searchsorted(np.cumsum(counts), global_chunk, side="right"))
        first = int(counts[:pos].sum())
        return int(self.entries["data_offset"][pos]) + int(self.chunks["stored_nbytes"][first:global_chunk].sum())

    def stored_chunk(self, global_chunk: int) -> bytes:
        start = self.chunk_offset(global_chunk)
        return bytes(self.data[start : start + int(self.chunks["stored_nbytes"][global_chunk])])

    def replace_last_chunk(self, blob: bytes) -> None:
        """Swap the file's last chunk for ``blob``, fixing its length and
        checksum, its tensor's stored size and the padding before the index."""
        last = len(self.chunks) - 1
        start = self.chunk_offset(last)
        del self.data[start:]
        self.data += blob
        self.data += bytes(-len(self.data) % self.alignment)
        stored = int(self.entries["stored_nbytes"][-1])
        self.entries["stored_nbytes"][-1] = stored + len(blob) - int(self.chunks["stored_nbytes"][last])
        self.chunks["stored_nbytes"][last] = len(blob)
        self.chunks["checksum"][last] = xxhash.xxh3_64_intdigest(blob)


def base_tensors():
    return [
        ("a", np.arange(6, dtype=np.float32).reshape(2, 3), None),  # pos 0: 1 raw chunk
        ("m", np.arange(320, dtype=np.int16).reshape(40, 8), None),  # pos 1: 2 raw chunks (32 + 8 rows)
        ("i", np.arange(-5, 5, dtype=np.int8), None),  # pos 2: 1 raw chunk
        ("z", np.zeros((64, 4), dtype=np.float32), "zstd"),  # pos 3: 2 zstd chunks, 4 planes each
    ]


A, M, I, Z = range(4)  # noqa: E741 - the positions of tensors "a", "m", "i" and "z" above


@pytest.fixture(scope="module")
def base_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("base") / "base.lzy"
    with ls.Writer(path, chunk_bytes=512, metadata={"step": 1}) as w:
        for name, arr, compression in base_tensors():
            w.add(name, arr, compression=compression)
    blob = path.read_bytes()
    p = Parts.parse(blob)
    # The cases below rely on this layout.
    assert list(p.entries["chunk_count"]) == [1, 2, 1, 2]
    assert list(p.entries["codec"]) == [0, 0, 0, 1]
    assert int(p.entries["planes"][Z]) == 4
    assert p.build() == blob  # the crafting helper round-trips exactly
    return blob


@pytest.fixture
def parts(base_bytes) -> Parts:
    return Parts.parse(base_bytes)


def attempt(fn):
    """Run ``fn`` under tracemalloc; return (exception or None, peak bytes)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - classified by the caller
        err = exc
    else:
        err = None
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return err, peak


def check_error(err, peak, what: str) -> None:
    assert peak < PEAK_LIMIT, f"{what}: allocated {peak} bytes"
    assert err is not None, f"{what}: no error raised"
    assert not isinstance(err, BANNED), f"{what}: {type(err).__name__}: {err}"
    assert isinstance(err, ls.FormatError), f"{what}: expected FormatError, got {type(err).__name__}: {err}"


def expect_open_rejected(tmp_path, blob: bytes) -> ls.FormatError:
    """A rule that ties the whole file together is broken: ls.open refuses it."""
    path = tmp_path / "hostile.lzy"
    path.write_bytes(blob)

    def go():
        ls.open(path).close()

    err, peak = attempt(go)
    check_error(err, peak, "ls.open")
    return err


def expect_index_rejected(tmp_path, blob: bytes) -> ls.FormatError:
    """The index breaks a rule: ls.open refuses the file, or (for a rule of
    one entry, which docs/format.md §13.1 lets a reader check on first use)
    every way of reaching a bad entry does, before anything derived from
    it is returned. Nothing but FormatError escapes, and no check allocates
    memory sized by the file's claims."""
    path = tmp_path / "hostile.lzy"
    path.write_bytes(blob)
    holder = {}
    err, peak = attempt(lambda: holder.setdefault("ck", ls.open(path)))
    if err is not None:
        check_error(err, peak, "ls.open")
        return err
    with holder["ck"] as ck:
        # Listing the names checks that no two are equal (rule K3).
        err, peak = attempt(lambda: holder.setdefault("names", list(ck)))
        if err is not None:
            check_error(err, peak, "list(ck)")
            reads = [("ck.load()", ck.load), ("ck.verify()", ck.verify), ("ls.load(path)", lambda: ls.load(path))]
            for what, fn in reads:
                err2, peak = attempt(fn)
                check_error(err2, peak, what)
            return err
        refused = []
        for name in holder["names"]:
            err, peak = attempt(lambda name=name: ck.info(name))
            if err is not None:
                check_error(err, peak, f"ck.info({name!r})")
                assert repr(name) in str(err), f"the error does not name the tensor: {err}"
                refused.append((name, err))
        assert refused, "a hostile index was accepted: every entry passed"
        name, first = refused[0]
        for what, fn in [
            (f"ck[{name!r}]", lambda: ck[name]),
            (f"ck.get_slice({name!r})", lambda: ck.get_slice(name)),
            ("ck.load()", ck.load),
            ("ck.verify()", ck.verify),
            ("ck.nbytes", lambda: ck.nbytes),
            ("ls.load(path)", lambda: ls.load(path)),
        ]:
            err, peak = attempt(fn)
            check_error(err, peak, what)
    return first


def read_everything(ck) -> None:
    for name in ck:
        ck[name]
    for name in ck:
        s = ck.get_slice(name)
        s[...]
        if s.shape:
            s[: max(1, s.shape[0] // 2)]
            s[-1]
    ck.load()
    ck.verify()


def expect_read_rejected(tmp_path, blob: bytes, name: str) -> None:
    """The file opens (its index is sound) but reading ``name`` fails."""
    path = tmp_path / "hostile.lzy"
    path.write_bytes(blob)
    with ls.open(path) as ck:
        for what, fn in [
            (f"ck[{name!r}]", lambda: ck[name]),
            (f"get_slice({name!r})[...]", lambda: ck.get_slice(name)[...]),
            ("ck.load()", lambda: ck.load()),
            ("ls.load()", lambda: ls.load(path)),
        ]:
            err, peak = attempt(fn)
            check_error(err, peak, what)


def expect_rejected_somewhere(tmp_path, blob: bytes) -> None:
    """Either opening or reading must give FormatError; nothing else may escape."""
    path = tmp_path / "hostile.lzy"
    path.write_bytes(blob)
    holder = {}

    def go():
        holder["ck"] = ls.open(path)

    err, peak = attempt(go)
    if err is None:
        with holder["ck"] as ck:
            err, peak = attempt(lambda: read_everything(ck))
    check_error(err, peak, "open or read")


# --- index cases: each mutates Parts, and the file must fail to open ---------------


def set_entry(pos, fieldname, value):
    def mutate(p: Parts):
        p.entries[fieldname][pos] = value
    return mutate


def set_header(**values):
    def mutate(p: Parts):
        p.header.update(values)
    return mutate


def set_trailer(**values):
    def mutate(p: Parts):
        p.trailer.update(values)
    return mutate


def set_keys(keys: bytes):
    def mutate(p: Parts):
        p.keys = keys
    return mutate


def set_metadata(metadata: bytes):
    def mutate(p: Parts):
        p.metadata = metadata
    return mutate


def shape(pos, dims, nbytes=None):
    def mutate(p: Parts):
        p.set_dims(pos, dims)
        if nbytes is not None:
            p.entries["nbytes"][pos] = nbytes
    return mutate


def chunk_field(global_chunk, fieldname, value):
    def mutate(p: Parts):
        p.chunks[fieldname][global_chunk] = value
    return mutate


def both(*mutations):
    def mutate(p: Parts):
        for m in mutations:
            m(p)
    return mutate


def extra_chunk_for_m(p: Parts):
    # m claims 3 chunks (its grid has 2) and the index holds a record for it.
    p.entries["chunk_count"][M] = 3
    p.chunks = np.insert(p.chunks, 3, np.array([(0, 0)], dtype=CHUNK_DTYPE))


def fewer_chunks_for_m(p: Parts):
    p.entries["chunk_count"][M] = 1
    p.entries["stored_nbytes"][M] = 512
    p.chunks = np.delete(p.chunks, 2)


def chunk_counts_wrap_around(p: Parts):
    # Five int8 tensors whose chunk grids are each legal (< 2**62 elements,
    # extent 1) but whose chunk counts sum to exactly 2**64: a uint64 sum
    # wraps to 0, matching an index that holds no chunk records at all.
    big = 2**62 - 1024  # exactly representable as a float64, below 2**62
    n = 5
    counts = [big] * 4 + [4096]
    entries = np.zeros(n, dtype=ENTRY_DTYPE)
    entries["data_offset"] = 64
    entries["nbytes"] = counts
    entries["chunk_count"] = counts
    entries["chunk_extent"] = 1
    entries["dtype"] = 2  # int8
    entries["ndim"] = 1
    entries["planes"] = 1
    p.entries = entries
    p.dims = np.array(counts, dtype=np.uint64)
    p.chunks = np.zeros(0, dtype=CHUNK_DTYPE)
    p.keys = b"a\0b\0c\0d\0e\0"
    del p.data[64:]


@pytest.mark.slow
def test_chunk_counts_wrapping_around_2_64(parts, tmp_path):
    # Run in a child process: this file has crashed the interpreter
    # (a segfault inside numpy) instead of raising, which would take the
    # whole test session down with it.
    chunk_counts_wrap_around(parts)
    path = tmp_path / "wrap.lzy"
    path.write_bytes(parts.build())
    code = (
        "import sys, lazystore as ls\n"
        "try:\n"
        "    ls.open(sys.argv[1])\n"
        "except ls.FormatError:\n"
        "    sys.exit(0)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "    sys.exit(2)\n"
        "print('opened')\n"
        "sys.exit(3)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, (
        f"ls.open on a file whose chunk counts sum to 2**64 exited with {proc.returncode} "
        f"(negative = killed by that signal): {proc.stdout} {proc.stderr[-2000:]}"
    )


def ndim_over_64(pos, ndim):
    def mutate(p: Parts):
        ndim_now = int(p.entries["ndim"][pos])
        start = int(p.entries["ndim"][:pos].astype(int).sum())
        old = [int(d) for d in p.dims[start : start + ndim_now]]
        p.set_dims(pos, old + [1] * (ndim - ndim_now))
    return mutate


def nested_metadata(depth: int) -> bytes:
    return b'{"a":' + b"[" * depth + b"]" * depth + b"}"


INDEX_CASES = {
    # shapes and sizes
    "dims-product-overflows-2**64": shape(A, [2**32, 2**32], nbytes=0),
    "dims-product-wraps-to-stored-nbytes": shape(A, [2, 2**61 + 3]),  # 4*(2**62+6) = 24 mod 2**64
    "three-dims-overflow": shape(A, [2**22, 2**22, 2**22], nbytes=0),
    "dim-2**63": shape(A, [2**63, 1], nbytes=2**65 % 2**64),
    "dim-u64-max": shape(A, [U64_MAX, 1], nbytes=(U64_MAX * 4) % 2**64),
    "nbytes-too-big": set_entry(A, "nbytes", 28),
    "nbytes-too-small": set_entry(A, "nbytes", 20),
    "nbytes-zero": set_entry(M, "nbytes", 0),
    "nbytes-u64-max": set_entry(Z, "nbytes", U64_MAX),
    "dtype-code-0": set_entry(A, "dtype", 0),
    "dtype-code-18": set_entry(A, "dtype", 18),
    "dtype-code-255": set_entry(I, "dtype", 255),
    "dtype-changes-itemsize": set_entry(A, "dtype", 12),  # float64: 48 bytes, not 24
    "codec-2": set_entry(A, "codec", 2),
    "codec-255": set_entry(Z, "codec", 255),
    "raw-with-planes": set_entry(A, "planes", 4),
    "raw-with-zero-planes": set_entry(A, "planes", 0),
    "zstd-with-3-planes": set_entry(Z, "planes", 3),
    "zstd-with-zero-planes": set_entry(Z, "planes", 0),
    "zstd-with-255-planes": set_entry(Z, "planes", 255),
    "ndim-65": ndim_over_64(A, 65),
    "ndim-255": ndim_over_64(I, 255),
    "ndim-without-dims": set_entry(A, "ndim", 3),
    "ndim-255-without-dims": set_entry(A, "ndim", 255),
    "reserved-entry-byte-0": lambda p: p.entries["reserved"].__setitem__((A, 0), 1),
    "reserved-entry-byte-1": lambda p: p.entries["reserved"].__setitem__((M, 1), 0x80),
    "reserved-entry-byte-2": lambda p: p.entries["reserved"].__setitem__((Z, 2), 0xFF),
    # header counts and sizes
    "tensor-count-u64-max": set_header(tensor_count=U64_MAX),
    "tensor-count-2**32": set_header(tensor_count=2**32),
    "tensor-count-plus-one": set_header(tensor_count=5),
    "tensor-count-zero": set_header(tensor_count=0),
    "dims-count-2**63": set_header(dims_count=2**63),
    "dims-count-plus-one": set_header(dims_count=8),
    "chunk-count-2**60": set_header(chunk_count=2**60),
    "chunk-count-u64-max": set_header(chunk_count=U64_MAX),
    "keys-nbytes-u64-max": set_header(keys_nbytes=U64_MAX),
    "metadata-nbytes-2**62": set_header(metadata_nbytes=2**62),
    "all-counts-absurd": set_header(tensor_count=2**61, dims_count=2**61, chunk_count=2**61,
                                    keys_nbytes=2**61, metadata_nbytes=2**61),
    "entry-size-0": set_header(entry_size=0),
    "entry-size-40": set_header(entry_size=40),
    "entry-size-not-multiple-of-8": set_header(entry_size=52),
    "entry-size-huge": set_header(entry_size=2**32 - 8),
    "chunk-record-size-8": set_header(chunk_record_size=8),
    "chunk-record-size-huge": set_header(chunk_record_size=2**31),
    "header-reserved1": set_header(reserved1=1),
    "header-reserved2": set_header(reserved2=2**63),
    # alignment
    "alignment-0": set_header(alignment=0),
    "alignment-1": set_header(alignment=1),
    "alignment-48": set_header(alignment=48),
    "alignment-96": set_header(alignment=96),
    "alignment-4": set_header(alignment=4),
    "alignment-2**31": set_header(alignment=2**31),
    "alignment-u32-max": set_header(alignment=2**32 - 1),
    "alignment-128-layout-mismatch": set_header(alignment=128),
    "alignment-32-layout-mismatch": set_header(alignment=32),
    # chunk grid
    "chunk-count-above-grid": extra_chunk_for_m,
    "chunk-count-below-grid": fewer_chunks_for_m,
    "chunk-count-field-only": set_entry(M, "chunk_count", 3),
    "entry-chunk-count-u64-max": set_entry(Z, "chunk_count", U64_MAX),
    "entry-chunk-count-2**62": set_entry(Z, "chunk_count", 2**62),
    "chunk-extent-zero": set_entry(M, "chunk_extent", 0),
    "chunk-extent-beyond-axis": set_entry(M, "chunk_extent", 41),
    "chunk-extent-u64-max": set_entry(M, "chunk_extent", U64_MAX),
    "chunk-extent-changes-grid": set_entry(M, "chunk_extent", 20),
    "chunk-axis-out-of-range": set_entry(M, "chunk_axis", 2),
    "chunk-axis-255": set_entry(M, "chunk_axis", 255),
    # layout
    "data-offset-beyond-file": set_entry(I, "data_offset", 10_000),
    "data-offset-2**63": set_entry(I, "data_offset", 2**63),
    "data-offset-u64-max": set_entry(Z, "data_offset", U64_MAX),
    "data-offset-in-preamble": set_entry(A, "data_offset", 0),
    "data-offset-right-after-preamble": set_entry(A, "data_offset", 16),
    "data-offset-overlaps-previous": set_entry(M, "data_offset", 64),
    "data-offset-overlaps-previous-aligned": set_entry(I, "data_offset", 704),
    "data-offset-not-aligned": set_entry(M, "data_offset", 129),
    "data-offset-leaves-gap": set_entry(I, "data_offset", 832),
    "data-offset-in-index": lambda p: p.entries["data_offset"].__setitem__(Z, len(p.data) + 8),
    "stored-nbytes-above-sum": set_entry(Z, "stored_nbytes", 169),
    "stored-nbytes-below-sum": set_entry(Z, "stored_nbytes", 167),
    "stored-nbytes-raw-above-sum": set_entry(I, "stored_nbytes", 11),
    "stored-nbytes-u64-max": set_entry(Z, "stored_nbytes", U64_MAX),
    "raw-chunk-length-mismatch": both(chunk_field(1, "stored_nbytes", 511), chunk_field(2, "stored_nbytes", 129)),
    "raw-chunk-length-plus-one": both(chunk_field(3, "stored_nbytes", 11), set_entry(I, "stored_nbytes", 11)),
    "raw-chunk-length-zero": both(chunk_field(0, "stored_nbytes", 0), set_entry(A, "stored_nbytes", 0)),
    "compressed-chunk-shorter-than-plane-header": both(chunk_field(4, "stored_nbytes", 8),
                                                      chunk_field(5, "stored_nbytes", 160)),
    "chunk-stored-nbytes-2**63": both(chunk_field(4, "stored_nbytes", 2**63),
                                      chunk_field(5, "stored_nbytes", 2**63 + 168)),
    "chunk-stored-nbytes-wrap": both(chunk_field(4, "stored_nbytes", U64_MAX),
                                     chunk_field(5, "stored_nbytes", 169)),
    # keys
    "duplicate-keys": set_keys(b"a\0m\0a\0z\0"),
    "duplicate-empty-keys": set_keys(b"\0\0i\0z\0"),
    "invalid-utf8-key": set_keys(b"a\0\xff\xfe\0i\0z\0"),
    "overlong-utf8-key": set_keys(b"a\0\xc0\x80\0i\0z\0"),
    "surrogate-utf8-key": set_keys(b"a\0\xed\xa0\x80\0i\0z\0"),
    "truncated-utf8-key": set_keys(b"a\0m\0i\0z\xe2\x82\0"),
    "keys-missing-final-nul": set_keys(b"a\0m\0i\0z"),
    "keys-missing-nul": set_keys(b"a\0mi\0z\0"),
    "keys-extra-nul": set_keys(b"a\0m\0i\0z\0\0"),
    "keys-extra-key": set_keys(b"a\0m\0i\0z\0q\0"),
    "keys-empty": set_keys(b""),
    # metadata
    "metadata-not-json": set_metadata(b"{step: 1}"),
    "metadata-truncated-json": set_metadata(b'{"step": 1'),
    "metadata-not-utf8": set_metadata(b'{"s": "\xff"}'),
    "metadata-array": set_metadata(b"[1, 2]"),
    "metadata-string": set_metadata(b'"step"'),
    "metadata-null": set_metadata(b"null"),
    "metadata-number": set_metadata(b"7"),
    "metadata-nan": set_metadata(b'{"x": NaN}'),
    "metadata-nested-nan": set_metadata(b'{"x": [1, {"y": NaN}]}'),
    "metadata-infinity": set_metadata(b'{"x": Infinity}'),
    "metadata-minus-infinity": set_metadata(b'{"x": -Infinity}'),
    "metadata-overflowing-float": set_metadata(b'{"x": 1e999}'),  # parses as inf
    "metadata-nested-100000": set_metadata(nested_metadata(100_000)),
    "metadata-nested-objects-100000": set_metadata(b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    "metadata-huge-int": set_metadata(b'{"x": 1' + b"0" * 10_000 + b"}"),
    "metadata-trailing-garbage": set_metadata(b'{"step": 1} x'),
    "metadata-two-objects": set_metadata(b'{"step": 1}{"step": 2}'),
    # trailer
    "index-length-2**40": set_trailer(index_length=2**40),
    "index-length-2**30": set_trailer(index_length=2**30),
    "index-length-u64-max": set_trailer(index_length=U64_MAX),
    "index-length-zero": set_trailer(index_length=0),
    "index-offset-u64-max": set_trailer(index_offset=U64_MAX),
    "index-offset-zero": set_trailer(index_offset=0),
    "index-offset-and-length-sum-wraps": set_trailer(index_offset=2**63, index_length=2**63),
    "index-checksum-wrong": set_trailer(checksum=12345),
    "trailer-reserved": set_trailer(reserved=1),
    "trailer-reserved-high": set_trailer(reserved=2**31),
    "trailer-magic": set_trailer(magic=b"\x89LZY\r\n\x1a\x0b"),
    "trailer-minor-differs-from-preamble": set_trailer(minor=1),
}


# Cases breaking a rule of one entry (or of its chunk records or place):
# these may be refused on first use of that entry rather than on open.
ENTRY_RULE_PREFIXES = ("dims-product", "three-dims", "dim-", "nbytes-", "dtype-", "codec-", "raw-with",
                       "zstd-with", "ndim-65", "ndim-255", "reserved-entry", "alignment-128-layout",
                       "alignment-32-layout", "chunk-count-above", "chunk-count-below", "chunk-extent",
                       "chunk-axis", "data-offset", "stored-nbytes", "raw-chunk", "compressed-chunk",
                       "chunk-stored-nbytes", "duplicate-")
FILE_WIDE_CASES = [n for n in INDEX_CASES if not n.startswith(ENTRY_RULE_PREFIXES) or n == "ndim-255-without-dims"]


@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_hostile_index_is_rejected(parts, tmp_path, name):
    INDEX_CASES[name](parts)
    expect_index_rejected(tmp_path, parts.build())


@pytest.mark.parametrize("name", FILE_WIDE_CASES)
def test_file_wide_rules_are_checked_on_open(parts, tmp_path, name):
    INDEX_CASES[name](parts)
    expect_open_rejected(tmp_path, parts.build())


# --- metadata that would cost many times its size to parse ---------------------------
# docs/format.md §11.6: readers refuse metadata over MAX_METADATA_BYTES or
# MAX_METADATA_VALUES before parsing it. The bounds are shrunk here so that a
# ~100 KiB blob stands for a 1 GiB one (tests/_core/test_strict_json.py checks
# the real ones).

SMALL_VALUES = 20_000


def open_peak(path) -> tuple[Exception | None, int]:
    def go():
        ls.open(path).close()
    return attempt(go)


@pytest.mark.slow
@pytest.mark.parametrize("element", [b"[]", b"{}", b'{"a":0}', b"[[]]", b"0"])
def test_metadata_with_more_values_than_the_bound_is_refused_before_it_is_parsed(parts, tmp_path, monkeypatch,
                                                                                  element):
    from lazystore._core import strict_json

    count = SMALL_VALUES  # each element adds at least one value: over the bound
    parts.metadata = b'{"m":[' + b",".join([element] * count) + b"]}"
    path = tmp_path / "meta.lzy"
    path.write_bytes(parts.build())
    # Unbounded (as before), the parse costs many times the blob ...
    monkeypatch.setattr(strict_json, "MAX_VALUES", 10 * count)
    err, parsed_peak = open_peak(path)
    assert err is None
    # ... bounded, ls.open refuses the file having read little more than the blob.
    monkeypatch.setattr(strict_json, "MAX_VALUES", SMALL_VALUES)
    err, peak = open_peak(path)
    check_error(err, peak, "ls.open")
    assert "JSON values" in str(err) and "§11.6" in str(err)
    assert peak < 2 * len(parts.metadata) + (256 << 10), (peak, len(parts.metadata))
    if element != b"0":  # small ints are shared objects: cheap to parse, cheap to refuse
        assert parsed_peak > 5 * peak, (parsed_peak, peak)


def test_metadata_longer_than_the_bound_is_refused(parts, tmp_path, monkeypatch):
    from lazystore._core import strict_json

    monkeypatch.setattr(strict_json, "MAX_BYTES", 1 << 16)
    parts.metadata = b'{"s":"' + b"x" * (1 << 16) + b'"}'
    path = tmp_path / "meta.lzy"
    path.write_bytes(parts.build())
    err, peak = open_peak(path)
    check_error(err, peak, "ls.open")
    assert "bytes of JSON" in str(err)


def test_metadata_at_the_bound_reads(parts, tmp_path, monkeypatch):
    from lazystore._core import strict_json

    monkeypatch.setattr(strict_json, "MAX_VALUES", SMALL_VALUES)
    # 1 + '{' + ':' + '[' + (n - 1) ',' + one ',' and ':' for "step" = n + 5 counted
    n = SMALL_VALUES - 5
    parts.metadata = b'{"m":[' + b",".join([b"1"] * n) + b'],"step":1}'
    path = tmp_path / "meta.lzy"
    path.write_bytes(parts.build())
    with ls.open(path) as ck:
        assert ck.metadata["m"] == [1] * n and ck.metadata["step"] == 1
    parts.metadata = parts.metadata.replace(b"[1,", b"[1,1,")
    path.write_bytes(parts.build())
    with pytest.raises(ls.FormatError, match="JSON values"):
        ls.open(path)


@pytest.mark.parametrize("keys", [b"a\0m\0a\0z\0", b"a\0m\0z\0z\0"])
def test_a_duplicated_name_is_refused_before_use(parts, tmp_path, keys):
    # Rule K3 is checked per key on lookup and for all keys when they are
    # listed (docs/format.md §13.1): a lookup of the duplicated name fails,
    # as does anything that lists the names; other names can be read.
    set_keys(keys)(parts)
    path = tmp_path / "dup.lzy"
    path.write_bytes(parts.build())
    dup = keys.split(b"\0")[2].decode()
    with ls.open(path) as ck:
        for fn in (lambda: ck[dup], lambda: ck.info(dup), lambda: dup in ck, lambda: list(ck), ck.load):
            with pytest.raises(ls.FormatError, match="duplicate key"):
                fn()
        assert np.array_equal(ck["m"], np.arange(320, dtype=np.int16).reshape(40, 8))
    with pytest.raises(ls.FormatError, match="duplicate key"):
        ls.load(path)


def test_a_bad_entry_leaves_the_others_readable(parts, tmp_path):
    # Entry rules are checked per entry (docs/format.md §13.1): a lie in
    # tensor "m" refuses "m" by every way of reaching it, and nothing else.
    INDEX_CASES["chunk-extent-zero"](parts)
    err = expect_index_rejected(tmp_path, parts.build())
    assert "'m'" in str(err) and "chunk extent" in str(err)
    with ls.open(tmp_path / "hostile.lzy") as ck:
        assert np.array_equal(ck["a"], np.arange(6, dtype=np.float32).reshape(2, 3))
        assert np.array_equal(ck["z"], np.zeros((64, 4), dtype=np.float32))


def test_hostile_index_rejected_by_load_too(parts, tmp_path):
    set_header(tensor_count=U64_MAX)(parts)
    path = tmp_path / "hostile.lzy"
    path.write_bytes(parts.build())
    err, peak = attempt(lambda: ls.load(path))
    check_error(err, peak, "ls.load")


def test_index_that_is_longer_than_its_sections(parts, tmp_path):
    blob = parts.build()
    p = Parts.parse(blob)
    index = p.index_bytes() + b"\0" * 8  # trailing bytes no section accounts for
    trailer = TRAILER.pack(len(p.data), len(index), xxhash.xxh3_64_intdigest(index), 1, 0, 0, MAGIC)
    expect_open_rejected(tmp_path, bytes(p.data) + index + trailer)


def test_index_header_truncated(parts, tmp_path):
    index = parts.index_bytes()[:40]
    trailer = TRAILER.pack(len(parts.data), len(index), xxhash.xxh3_64_intdigest(index), 1, 0, 0, MAGIC)
    expect_open_rejected(tmp_path, bytes(parts.data) + index + trailer)


def test_nonzero_preamble_reserved(parts, tmp_path):
    parts.data[12] = 1
    expect_open_rejected(tmp_path, parts.build())


def test_nonzero_padding_after_preamble(parts, tmp_path):
    parts.data[40] = 1
    expect_open_rejected(tmp_path, parts.build())


def test_nonzero_padding_between_tensors_fails_verify(parts, tmp_path):
    # a ends at 88, m starts at 128: a byte in between is padding.
    parts.data[100] = 7
    path = tmp_path / "pad.lzy"
    path.write_bytes(parts.build())
    with ls.open(path) as ck:
        assert ck.verify() == ["a"]


def test_unmodified_base_file_reads_back(parts, tmp_path):
    # The crafting helpers are sound: a rebuilt file is valid.
    path = tmp_path / "ok.lzy"
    path.write_bytes(parts.build())
    with ls.open(path) as ck:
        assert ck.verify() == []
        for name, arr, _ in base_tensors():
            np.testing.assert_array_equal(ck[name], arr)
        assert ck.metadata == {"step": 1}


# --- empty tensors with huge shapes -------------------------------------------------


@pytest.fixture
def empty_parts(tmp_path) -> Parts:
    path = tmp_path / "empty.lzy"
    ls.save({"e": np.zeros((0, 3), dtype=np.float32), "i": np.arange(4, dtype=np.int8)}, path)
    return Parts.parse(path.read_bytes())


@pytest.mark.parametrize(
    "dims",
    [[0, 2**61, 2**61], [0, 2**62 - 1, 8], [2**40, 0, 2**40, 2**40], [0, 2**61], [2**60, 0], [0, 2**30, 2**30]],
    ids=["0x2**61x2**61", "0x(2**62-1)x8", "2**40x0x2**40x2**40", "0x2**61", "2**60x0", "0x2**30x2**30"],
)
def test_empty_tensor_with_unrepresentable_shape(empty_parts, tmp_path, dims):
    # nbytes 0 is consistent with any shape holding a 0, but numpy cannot
    # build an array whose other dimensions, times the item size (float32
    # here), reach 2**63: the file must be rejected (on open or on read) with
    # FormatError, not a ValueError from numpy. Rule E8 bounds that product
    # at 2**62, as for a tensor with elements.
    empty_parts.set_dims(0, dims)
    expect_rejected_somewhere(tmp_path, empty_parts.build())


@pytest.mark.parametrize("dims", [[0, 2**40], [0, 2**60 - 1], [2**30, 0, 2**30 - 1]])
def test_empty_tensor_with_large_but_representable_shape(empty_parts, tmp_path, dims):
    empty_parts.set_dims(0, dims)  # float32: below 2**62 bytes, zeros counted as ones
    path = tmp_path / "empty.lzy"
    path.write_bytes(empty_parts.build())
    with ls.open(path) as ck:
        assert ck["e"].shape == tuple(dims)
        assert ck.get_slice("e")[...].shape == tuple(dims)
        assert ck.verify() == []


def test_empty_tensor_claiming_chunks(empty_parts, tmp_path):
    empty_parts.entries["chunk_count"][0] = 1
    empty_parts.chunks = np.insert(empty_parts.chunks, 0, np.array([(0, 0)], dtype=CHUNK_DTYPE))
    expect_index_rejected(tmp_path, empty_parts.build())


# --- a checkpoint without tensors ------------------------------------------------------


@pytest.fixture
def no_tensor_parts(tmp_path) -> Parts:
    path = tmp_path / "none.lzy"
    ls.save({}, path, metadata={"empty": True})
    return Parts.parse(path.read_bytes())


@pytest.mark.parametrize(
    "mutate",
    [
        set_keys(b"junk"),  # bytes in the key table, yet no key
        set_keys(b"\0"),
        lambda p: setattr(p, "dims", np.array([3], dtype=np.uint64)),
        lambda p: setattr(p, "chunks", np.zeros(1, dtype=CHUNK_DTYPE)),
        set_header(tensor_count=1),
        lambda p: p.data.extend(bytes(64)),  # data region without tensors
    ],
    ids=["key-bytes-without-nul", "one-empty-key", "stray-dims", "stray-chunk", "tensor-count", "stray-data"],
)
def test_hostile_checkpoint_without_tensors(no_tensor_parts, tmp_path, mutate):
    mutate(no_tensor_parts)
    expect_open_rejected(tmp_path, no_tensor_parts.build())


# --- compressed chunks that lie about their contents ------------------------------------

PLANE_LEN = 128  # z's chunk: 32 rows x 4 float32 = 512 bytes, 4 planes of 128


def frame_declaring(size: int) -> bytes:
    """A zstd frame whose header declares ``size`` content bytes (8-byte
    Frame_Content_Size, single segment) followed by the blocks of a real
    frame of zeros, so only the declaration lies."""
    real = zstandard.ZstdCompressor(level=1).compress(bytes(PLANE_LEN))
    assert real[4] == 0x20  # single segment, 1-byte content size: 6-byte header
    return b"\x28\xb5\x2f\xfd\xe0" + size.to_bytes(8, "little") + real[6:]


def frame_without_size(n: int) -> bytes:
    return zstandard.ZstdCompressor(level=1, write_content_size=False).compress(bytes(n))


def chunk_with_planes(planes: list[bytes], lengths: list[int] | None = None) -> bytes:
    lengths = [len(p) for p in planes] if lengths is None else lengths
    return np.array(lengths, dtype="<u4").tobytes() + b"".join(planes)


def good_planes(p: Parts) -> list[bytes]:
    chunk = p.stored_chunk(len(p.chunks) - 1)
    lengths = np.frombuffer(chunk[:16], "<u4").tolist()
    planes, pos = [], 16
    for n in lengths:
        planes.append(chunk[pos : pos + n])
        pos += n
    assert all(n < PLANE_LEN for n in lengths)  # all four are zstd frames
    return planes


def test_crafted_compressed_chunk_roundtrip(parts, tmp_path):
    # Re-encoding the last chunk from its own planes keeps the file valid,
    # so the failures below are due to the plane that was swapped.
    parts.replace_last_chunk(chunk_with_planes(good_planes(parts)))
    path = tmp_path / "ok.lzy"
    path.write_bytes(parts.build())
    with ls.open(path) as ck:
        np.testing.assert_array_equal(ck["z"], np.zeros((64, 4), np.float32))


BAD_PLANES = {
    "declares-1000-bytes": lambda: zstandard.ZstdCompressor(level=1).compress(bytes(1000)),
    "declares-2**40-bytes": lambda: frame_declaring(2**40),
    "declares-u64-max-minus-1": lambda: frame_declaring(2**64 - 2),
    "declares-129-bytes": lambda: frame_declaring(PLANE_LEN + 1),
    "declares-fewer-bytes": lambda: zstandard.ZstdCompressor(level=1).compress(bytes(100)),
    "undeclared-size-decodes-to-more": lambda: frame_without_size(1000),
    "undeclared-size-decodes-to-less": lambda: frame_without_size(100),
    "not-a-frame": lambda: b"\x01" * 20,
    "truncated-frame": lambda: zstandard.ZstdCompressor(level=1).compress(bytes(PLANE_LEN))[:-2],
    "empty-plane": lambda: b"",
    "plane-longer-than-decoded": lambda: bytes(PLANE_LEN + 1),
    "frame-then-extra-bytes": lambda: zstandard.ZstdCompressor(level=1).compress(bytes(PLANE_LEN)) + b"\0" * 4,
    "two-frames": lambda: zstandard.ZstdCompressor(level=1).compress(bytes(PLANE_LEN)) * 2,
}


@pytest.mark.parametrize("name", list(BAD_PLANES))
def test_lying_compressed_plane_is_rejected_on_read(parts, tmp_path, name):
    planes = good_planes(parts)
    planes[1] = BAD_PLANES[name]()
    parts.replace_last_chunk(chunk_with_planes(planes))
    blob = parts.build()
    expect_read_rejected(tmp_path, blob, "z")
    # The other tensors are unaffected, and get_slice of the intact chunk works.
    with ls.open(tmp_path / "hostile.lzy") as ck:
        np.testing.assert_array_equal(ck["m"], base_tensors()[M][1])
        np.testing.assert_array_equal(ck.get_slice("z")[:32], np.zeros((32, 4), np.float32))
        err, peak = attempt(lambda: ck.get_slice("z")[32:])
        check_error(err, peak, "get_slice('z')[32:]")


@pytest.mark.parametrize(
    "lengths",
    [[10, 10, 10, 10], [2**32 - 1, 0, 0, 0], [0, 0, 0, 0], None],
    ids=["too-short", "u32-max", "zeros", "one-short"],
)
def test_plane_lengths_not_adding_up(parts, tmp_path, lengths):
    planes = good_planes(parts)
    if lengths is None:
        lengths = [len(p) for p in planes]
        lengths[-1] -= 1
    parts.replace_last_chunk(chunk_with_planes(planes, lengths))
    expect_read_rejected(tmp_path, parts.build(), "z")


@pytest.mark.parametrize("name", [*BAD_PLANES, "lengths-not-adding-up"])
def test_lying_compressed_chunk_fails_verify(parts, tmp_path, name):
    # The chunk's checksum is valid (recomputed for the lie), so only
    # decoding it catches it: verify() decodes every compressed chunk, from
    # a mapped file and from a source it fetches from alike.
    planes = good_planes(parts)
    if name in BAD_PLANES:
        planes[1] = BAD_PLANES[name]()
        chunk = chunk_with_planes(planes)
    else:
        chunk = chunk_with_planes(planes, [len(planes[0]) - 1, *map(len, planes[1:])])
    parts.replace_last_chunk(chunk)
    path = tmp_path / "hostile.lzy"
    path.write_bytes(parts.build())
    for mmap in (True, False):
        with ls.open(path, mmap=mmap) as ck:
            assert ck.verify() == ["z"]
            assert ck.verify(["m", "z"]) == ["z"]
            assert ck.verify(["a", "m"]) == []


def _undecodable_but_checksummed(path, tensors: dict, **save_options) -> None:
    """Save ``tensors`` (one compressed chunk last), then replace that chunk
    with bytes that are no zstd frame, fixing its checksum and the index's."""
    ls.save(tensors, path, **save_options)
    p = Parts.parse(path.read_bytes())
    p.trailer["minor"] = TRAILER.unpack_from(path.read_bytes(), path.stat().st_size - TRAILER.size)[4]
    planes = int(p.entries["planes"][-1])
    p.replace_last_chunk(chunk_with_planes([b"\x01" * 20] * planes))
    path.write_bytes(p.build())


def test_verify_command_fails_a_file_whose_chunks_cannot_be_decoded(tmp_path, capsys):
    from lazystore.cli import main

    path = tmp_path / "undecodable.lzy"
    _undecodable_but_checksummed(path, {"z": np.zeros(64, np.float32)}, compression="zstd")
    with ls.open(path) as ck:
        assert ck.verify() == ["z"]
        with pytest.raises(ls.FormatError, match="'z' chunk 0"):
            ck["z"]
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "corrupt: z" in out and "1 of 1 tensor corrupt" in out


def test_verify_decodes_a_delta_chunk_without_its_base_twice(tmp_path):
    # A delta chunk decodes onto its base's bytes; whether it decodes at all
    # does not depend on them, so verify() decodes it onto scratch memory and
    # checks the base's own chunks through the base's verify().
    rng = np.random.default_rng(5)
    base = rng.standard_normal(4096).astype(np.float32)
    ls.save({"d": base, "k": base}, tmp_path / "base.lzy")
    step = base.copy()
    step[::7] += np.float32(1e-3)
    path = tmp_path / "delta.lzy"
    _undecodable_but_checksummed(path, {"k": base, "d": step}, base=tmp_path / "base.lzy")
    with ls.open(path) as ck:
        assert ck.info("d").compression == "delta"
        assert ck.verify() == ["d"]
        assert np.array_equal(ck["k"], base)
        with pytest.raises(ls.FormatError, match="'d' chunk 0"):
            ck["d"]


# --- fuzzing ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz_base(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.lzy"
    with ls.Writer(path, chunk_bytes=128, metadata={"s": [1, 2]}) as w:
        w.add("w", np.arange(6, dtype=np.float32).reshape(2, 3))
        w.add("z", np.zeros((16, 4), dtype=np.float32), compression="zstd")
        w.add("b", np.array([True, False, True]))
    return path.read_bytes()


mutation = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 8)),
)


def apply_mutations(blob: bytes, mutations) -> bytes:
    buf = bytearray(blob)
    for kind, where, value in mutations:
        if not buf:
            break
        at = where % len(buf)
        if kind == "set":
            buf[at] = value
        elif kind == "insert":
            buf.insert(at, value)
        else:
            del buf[at : at + value]
    return bytes(buf)


def exercise(path) -> None:
    with ls.open(path) as ck:
        ck.metadata
        for name in ck:
            ck.info(name)
            ck[name]
            s = ck.get_slice(name)
            s[...]
            if s.shape:
                s[-1]
        ck.load()
        ck.verify()
    with ls.open(path, verify=True) as ck:
        for name in ck:
            ck[name]


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(mutation, min_size=1, max_size=4))
def test_fuzz_only_lazystore_errors_escape(fuzz_base, tmp_path, mutations):
    blob = apply_mutations(fuzz_base, mutations)
    path = tmp_path / "fuzz.lzy"
    path.unlink(missing_ok=True)  # never rewrite a file another view may map
    path.write_bytes(blob)
    try:
        exercise(path)
    except ls.LazyStoreError:
        pass


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_data_bytes_only(fuzz_base, tmp_path, data):
    # Mutations confined to the data region leave the index valid, so they
    # reach the chunk reading and decoding code instead of the index checks.
    index_offset = TRAILER.unpack_from(fuzz_base, len(fuzz_base) - TRAILER.size)[0]
    buf = bytearray(fuzz_base)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(16, index_offset - 1))
        buf[at] = data.draw(st.integers(0, 255))
    path = tmp_path / "fuzz.lzy"
    path.unlink(missing_ok=True)
    path.write_bytes(bytes(buf))
    try:
        exercise(path)
    except ls.LazyStoreError:
        pass


# --- the other readers: safetensors files, sharded folders, nested-state trees ---------------
#
# The same promise for every reader: a lying file is a FormatError, from
# ls.open or (for what only ls.load parses, the nested-state tree) ls.load,
# with allocation bounded by the real input, not by what it claims. No case
# asserts a time: a check that allocates nothing sized by the claims and
# touches only the input's own bytes finishes in milliseconds on these
# inputs of a few KiB (the whole parametrized set runs in about a second).

DEEP = 100_000  # far past any JSON parser's recursion limit


def expect_rejected_by_open_or_load(path) -> None:
    def go():
        ls.open(path).close()
        ls.load(path)

    err, peak = attempt(go)
    check_error(err, peak, "ls.open / ls.load")


def st_file(header: bytes, data: bytes = b"", *, length: int | None = None) -> bytes:
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header) if length is None else length) + header + data


def st_tensor(dtype="F32", shape=(2,), offsets=(0, 8)) -> bytes:
    import json

    return json.dumps({"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}).encode()


def st_with_system(system_json: bytes) -> bytes:
    import json

    meta = json.dumps({"lazystore.system": system_json.decode()}).encode()
    return st_file(b'{"__metadata__":' + meta + b',"a":' + st_tensor() + b"}", bytes(8))


def deep_tree_json(levels: int) -> bytes:
    # A valid-looking tree: a list node in a list node ... (each level 3 JSON levels).
    return (b'{"__lazystore_tree__":{"version":1,"root":' + b'{"t":"list","v":[' * levels + b'{"t":"none"}'
            + b"]}" * levels + b"}}")


SAFETENSORS_CASES = {
    # sizes and offsets
    "header-length-u64-max": st_file(b'{"a":' + st_tensor() + b"}", bytes(8), length=U64_MAX),
    "header-length-2**63": st_file(b'{"a":' + st_tensor() + b"}", bytes(8), length=2**63),
    "header-length-just-under-limit": st_file(b'{"a":' + st_tensor() + b"}", bytes(8), length=99_999_999),
    "shape-product-overflows-2**64": st_file(b'{"a":' + st_tensor(shape=(2**32, 2**32, 2**32)) + b"}", bytes(8)),
    "shape-product-wraps-to-8": st_file(b'{"a":' + st_tensor(dtype="U8", shape=(2**63, 2, 8)) + b"}", bytes(8)),
    "shape-dim-u64-max": st_file(b'{"a":' + st_tensor(shape=(U64_MAX,), offsets=(0, 8)) + b"}", bytes(8)),
    "shape-dim-2**64": st_file(b'{"a":' + st_tensor(shape=(2**64,)) + b"}", bytes(8)),
    "shape-65-dims": st_file(b'{"a":' + st_tensor(shape=(1,) * 63 + (2, 1)) + b"}", bytes(8)),
    "offsets-end-u64-max": st_file(b'{"a":' + st_tensor(offsets=(0, U64_MAX)) + b"}", bytes(8)),
    "offsets-both-huge": st_file(b'{"a":' + st_tensor(offsets=(2**63, 2**63 + 8)) + b"}", bytes(8)),
    "offsets-2**64": st_file(b'{"a":' + st_tensor(offsets=(0, 2**64)) + b"}", bytes(8)),
    "offsets-float": st_file(b'{"a":' + st_tensor(offsets=(0, 8.0)) + b"}", bytes(8)),
    "offsets-bool": st_file(b'{"a":' + st_tensor(offsets=(False, 8)) + b"}", bytes(8)),
    "empty-tensor-inside-data": st_file(b'{"a":' + st_tensor() + b',"e":' + st_tensor(shape=(0,), offsets=(4, 4))
                                        + b"}", bytes(8)),
    # duplicate keys
    "duplicate-tensor": st_file(b'{"a":' + st_tensor() + b',"a":' + st_tensor(offsets=(8, 16)) + b"}", bytes(16)),
    "duplicate-field-in-tensor": st_file(b'{"a":{"dtype":"F32","dtype":"I8","shape":[2],"data_offsets":[0,8]}}',
                                         bytes(8)),
    "duplicate-metadata-key": st_file(b'{"__metadata__":{"k":"1","k":"2"},"a":' + st_tensor() + b"}", bytes(8)),
    "duplicate-__metadata__": st_file(b'{"__metadata__":{},"__metadata__":{},"a":' + st_tensor() + b"}", bytes(8)),
    "duplicate-checksums-entry": st_file(b'{"__metadata__":{"lazystore.checksums":"{\\"a\\":\\"0000000000000000\\",'
                                         b'\\"a\\":\\"0000000000000001\\"}"},"a":' + st_tensor() + b"}", bytes(8)),
    # deep nesting
    "header-nested-lists": st_file(b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}"),
    "header-nested-objects": st_file(b'{"a":' * DEEP + b"1" + b"}" * DEEP),
    "metadata-value-nested": st_file(b'{"__metadata__":{"lazystore.metadata":"' + b'{\\"a\\":' * DEEP + b"1"
                                     + b"}" * DEEP + b'"},"a":' + st_tensor() + b"}", bytes(8)),
    "system-nested-json": st_with_system(b'{\\"a\\":' * DEEP + b"1" + b"}" * DEEP),
    "tree-nested-past-json-limit": st_with_system(deep_tree_json(DEEP // 3).replace(b'"', b'\\"')),
    "tree-nested-past-max-depth": st_with_system(deep_tree_json(101).replace(b'"', b'\\"')),
    # lies about checksums (a file lazystore wrote claims checksums it does not hold)
    "checksum-not-hex": st_file(b'{"__metadata__":{"lazystore.checksums":"{\\"a\\":\\"zz\\"}"},"a":' + st_tensor()
                                + b"}", bytes(8)),
}


@pytest.mark.parametrize("name", list(SAFETENSORS_CASES))
def test_hostile_safetensors(tmp_path, name):
    path = tmp_path / "hostile.safetensors"
    path.write_bytes(SAFETENSORS_CASES[name])
    expect_rejected_by_open_or_load(path)


def test_safetensors_checksum_lie_fails_verify(tmp_path):
    # A well-formed lazystore.checksums entry that is simply wrong: the file
    # opens (nothing in its header is inconsistent) and verify() names it.
    path = tmp_path / "lie.safetensors"
    path.write_bytes(st_file(b'{"__metadata__":{"lazystore.checksums":"{\\"a\\":\\"0123456789abcdef\\"}"},"a":'
                             + st_tensor() + b"}", bytes(8)))
    with ls.open(path) as ck:
        assert ck.verify() == ["a"]
    with ls.open(path, verify=True) as ck:
        err, peak = attempt(lambda: ck["a"])
        check_error(err, peak, "ck['a'] with verify=True")


@pytest.fixture
def shard_folder(tmp_path):
    folder = tmp_path / "ckpt"
    # 6 tensors of 64 bytes, 2 per shard.
    ls.save({f"t{i}": np.full((4, 4), i, np.float32) for i in range(6)}, folder, max_shard_size=140,
            metadata={"step": 1})
    assert len(list(folder.glob("model-*.lzy"))) == 3
    return folder


def _edit_index(key, value):
    def edit(index: dict) -> dict:
        index[key] = value
        return index
    return edit


def _shard(index: dict, i: int) -> str:
    """The name of the folder's i-th shard (names carry the save's id)."""
    return sorted(set(index["weight_map"].values()))[i]


class Nth(int):
    """A shard given by its position, resolved against the index being edited."""


def _point(name, shard):
    def edit(index: dict) -> dict:
        index["weight_map"][name] = _shard(index, shard) if isinstance(shard, Nth) else shard
        return index
    return edit


SHARDED_CASES = {
    # shard names that are not plain file names in the folder
    "shard-name-300-bytes": _point("t0", "a" * 300),
    "shard-name-with-nul": _point("t0", "model\0.lzy"),
    "shard-name-lone-surrogate": _point("t0", "\ud800.lzy"),
    "shard-name-absolute": _point("t0", "/etc/hostname"),
    "shard-name-parent": lambda index: _point("t0", "../" + _shard(index, 0))(index),
    "shard-name-dot-dot": _point("t0", ".."),
    "shard-name-empty": _point("t0", ""),
    "shard-name-is-the-index": _point("t0", "lazystore.index.json"),
    "shard-name-is-a-folder": _point("t0", "sub"),
    "shard-name-missing": _point("t0", "model-00009-of-00009.lzy"),
    "shard-name-not-str": _point("t0", 1),
    # tensors and shards that do not match
    "tensor-in-no-shard": _point("ghost", Nth(0)),
    "tensor-in-wrong-shard": _point("t0", Nth(1)),
    "tensor-missing-from-map": lambda index: (index["weight_map"].pop("t1"), index)[1],  # its shard holds t0
    # wrong types, missing members
    "weight-map-missing": lambda index: (index.pop("weight_map"), index)[1],
    "weight-map-list": lambda index: _edit_index("weight_map", [["t0", _shard(index, 0)]])(index),
    "weight-map-null": _edit_index("weight_map", None),
    "metadata-list": _edit_index("metadata", [1]),
    "system-metadata-str": _edit_index("system_metadata", "x"),
    "save-id-other": _edit_index("save_id", "0" * 32),
    "save-id-int": _edit_index("save_id", 7),
    "tree-nested-past-max-depth": _edit_index("system_metadata", {"__lazystore_tree__": {"version": 1, "root": {
        "t": "list", "v": [{"t": "none"}]}}}),  # a tree whose tensors are missing from it
    "index-not-object": lambda index: [index],
}


@pytest.mark.parametrize("name", list(SHARDED_CASES))
def test_hostile_sharded_index(shard_folder, name):
    import json

    (shard_folder / "sub").mkdir()
    index_path = shard_folder / "lazystore.index.json"
    index = SHARDED_CASES[name](json.loads(index_path.read_text()))
    index_path.write_text(json.dumps(index))
    expect_rejected_by_open_or_load(shard_folder)


def _first_shard(text: bytes) -> bytes:
    """The first shard's name in an index's text, quoted."""
    return json.dumps(_shard(json.loads(text), 0)).encode()


def _index_text(folder) -> bytes:
    return (folder / "lazystore.index.json").read_bytes()


SHARDED_TEXT_CASES = {
    "duplicate-weight-map-entry": lambda t: t.replace(b'"weight_map": {', b'"weight_map": {\n  "t0": '
                                                      + _first_shard(t) + b",", 1),
    "duplicate-weight-map": lambda t: t.replace(b'"weight_map": {', b'"weight_map": {}, "weight_map": {', 1),
    "duplicate-save-id": lambda t: t.replace(b'"save_id":', b'"save_id": "x", "save_id":', 1),
    "nested-lists": lambda t: t.replace(b'"metadata":', b'"deep": ' + b"[" * DEEP + b"]" * DEEP + b', "metadata":'),
    "nested-objects": lambda t: b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    "not-utf8": lambda t: t.replace(b'"step"', b'"st\xffep"'),
    "nan": lambda t: t.replace(b'"step": 1', b'"step": NaN'),
    "empty": lambda t: b"",
    "truncated": lambda t: t[: len(t) // 2],
}


@pytest.mark.parametrize("name", list(SHARDED_TEXT_CASES))
def test_hostile_sharded_index_text(shard_folder, name):
    index_path = shard_folder / "lazystore.index.json"
    index_path.write_bytes(SHARDED_TEXT_CASES[name](_index_text(shard_folder)))
    expect_rejected_by_open_or_load(shard_folder)


@pytest.mark.slow
def test_sharded_index_of_absurd_size(shard_folder):
    # A sparse index file past the 1 GiB limit: refused from its size alone,
    # without reading (or allocating) it.
    from lazystore.interop import sharded

    index_path = shard_folder / "lazystore.index.json"
    with open(index_path, "r+b") as f:
        f.truncate(sharded.MAX_INDEX_JSON + 1)
    expect_rejected_by_open_or_load(shard_folder)


@pytest.mark.slow
def test_hostile_shard_inside_a_folder(shard_folder):
    # One shard's index lies (valid checksum): the folder is refused as the file would be.
    shard = sorted(shard_folder.glob("model-*.lzy"))[1]
    p = Parts.parse(shard.read_bytes())
    p.set_dims(0, [2**32, 2**32])
    shard.unlink()
    shard.write_bytes(p.build())
    expect_rejected_by_open_or_load(shard_folder)


TREE_CASES = {
    "nested-past-json-limit": deep_tree_json(DEEP // 3),
    "nested-past-max-depth": deep_tree_json(101),
    "duplicate-dict-key": b'{"__lazystore_tree__":{"version":1,"root":{"t":"dict","v":[["a",{"t":"none"}],'
                          b'["a",{"t":"int","v":1}]]}}}',
    "int-of-5000-digits": b'{"__lazystore_tree__":{"version":1,"root":{"t":"int","v":1' + b"0" * 5000 + b"}}}",
    "duplicate-tree-member": b'{"__lazystore_tree__":{"version":1,"root":{"t":"none"}},'
                             b'"__lazystore_tree__":{"version":1,"root":{"t":"numpy","key":"nope"}}}',
}


@pytest.mark.parametrize("name", list(TREE_CASES))
def test_hostile_tree_metadata(parts, tmp_path, name):
    # The tree is the metadata of an otherwise valid lazystore file (the index
    # checksum recomputed): ls.load must refuse it, whatever ls.open accepts.
    parts.metadata = TREE_CASES[name]
    parts.keys, parts.entries, parts.dims, parts.chunks = b"", parts.entries[:0], parts.dims[:0], parts.chunks[:0]
    del parts.data[64:]
    path = tmp_path / "tree.lzy"
    path.write_bytes(parts.build())
    expect_rejected_by_open_or_load(path)


# --- format 1.4: chunk digests (docs/format.md §10.1, rules G1-G3) -----------------------------------


@pytest.fixture(scope="module")
def digest_bytes(tmp_path_factory) -> bytes:
    """The base tensors again, with BLAKE3 chunk digests: 56-byte records."""
    path = tmp_path_factory.mktemp("digests") / "digests.lzy"
    with ls.Writer(path, chunk_bytes=512, metadata={"step": 1}, digest="blake3") as w:
        for name, arr, compression in base_tensors():
            w.add(name, arr, compression=compression)
    blob = path.read_bytes()
    p = Parts.parse(blob)
    assert p.chunks.dtype.itemsize == 56 and list(p.entries["codec"]) == [0, 0, 0, 1]
    p.trailer["minor"] = 4
    assert p.build() == blob
    return blob


def digest_parts(blob: bytes, member=None) -> Parts:
    """``blob`` parsed, to be built as 1.4, with its member replaced by ``member`` when given."""
    p = Parts.parse(blob)
    p.trailer["minor"] = 4
    if member is not None:
        meta = json.loads(p.metadata)
        meta["__lazystore_digest__"] = member
        p.metadata = json.dumps(meta).encode()
    return p


def narrowed(p: Parts, dtype) -> Parts:
    records = np.zeros(len(p.chunks), dtype)
    for name in dtype.names:
        records[name] = p.chunks[name]
    p.chunks = records
    return p


@pytest.mark.parametrize("case", ["16-byte records", "24-byte records", "member version 2", "version true",
                                  "algorithm not a string", "member a list", "in a 1.3 file"])
def test_a_hostile_digest_declaration_is_refused_on_open(digest_bytes, tmp_path, case):
    p = digest_parts(digest_bytes, {
        "member version 2": {"version": 2, "algorithm": "blake3"},
        "version true": {"version": True, "algorithm": "blake3"},
        "algorithm not a string": {"version": 1, "algorithm": ["blake3"]},
        "member a list": [1, "blake3"],
    }.get(case))
    if case.endswith("records"):
        narrowed(p, CHUNK_DTYPE if case.startswith("16") else RECORD_DTYPES[1])
    if case == "in a 1.3 file":
        p.trailer["minor"] = 3
        struct.pack_into("<H", p.data, 10, 3)
    err = expect_open_rejected(tmp_path, p.build())
    assert "__lazystore_digest__" in str(err) and "rule G1" in str(err)
    assert not isinstance(err, ls.UnsupportedVersionError)


@pytest.mark.parametrize("member", [{"version": 1, "algorithm": "md5"}, {"version": 1, "algorithm": ""}])
def test_an_unknown_digest_algorithm_refuses_verification_only(digest_bytes, tmp_path, member):
    path = tmp_path / "odd.lzy"
    path.write_bytes(digest_parts(digest_bytes, member).build())
    with ls.open(path) as ck:
        for name, arr, _ in base_tensors():
            assert ck[name].tobytes() == arr.tobytes()
        for fn in (ck.verify, ck.load, lambda: ls.open(path, verify=True), lambda: ls.load(path)):
            err, peak = attempt(fn)
            check_error(err, peak, "a verified read")
            assert isinstance(err, ls.UnsupportedVersionError), err


@pytest.mark.parametrize("pos, chunk", [(A, 0), (M, 1), (Z, 1)], ids=["raw", "raw-second-chunk", "zstd"])
def test_a_digest_mismatch_is_refused_by_every_verified_read(digest_bytes, tmp_path, pos, chunk):
    # A chunk record's digest no longer matches its chunk (xxh3 and the index checksum are consistent).
    p = digest_parts(digest_bytes)
    g = p.chunk_slice(pos).start + chunk
    p.chunks["digest"][g][:4] = 0xAA
    path = tmp_path / "mismatch.lzy"
    path.write_bytes(p.build())
    name = base_tensors()[pos][0]
    with ls.open(path) as ck:
        ck[name]  # an unverified read checks xxh3, which matches
        assert ck.verify() == [name]
    with ls.open(path, verify=True) as ck:
        for fn in (lambda: ck[name], lambda: ck.get_slice(name)[...], ck.load, lambda: ls.load(path)):
            err, peak = attempt(fn)
            check_error(err, peak, "a verified read")
            assert isinstance(err, ls.DigestError) and f"tensor {name!r} chunk {chunk}" in str(err), err
