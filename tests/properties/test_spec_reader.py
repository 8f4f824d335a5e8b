"""An independent reader of format 1.1, written from docs/format.md alone,
which also checks the chunk digests of format 1.4 (§10.1) and decodes codec 4
of format 1.5 (§9.5: float planes with a Huffman-coded exponent, decoded one
bit at a time, with no tables).

``SpecFile`` uses only struct, json, xxhash, zstandard, numpy and ml_dtypes
(and hashlib and blake3 for digests); lazystore is used only to *write*
the files it reads. Rule ids (T5, E13, ...)
refer to docs/format.md section 13.4. The tests check that it decodes what
lazystore writes to exactly what ``lazystore.load`` returns.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import xxhash
import zstandard

from tests.paths import DATA, FORMAT_SPEC

# ----------------------------------------------------------------------------
# The reader (docs/format.md only)
# ----------------------------------------------------------------------------

MAGIC = b"\x89LZY\r\n\x1a\n"
READER_MINOR = 1  # this reader implements format 1.1
DTYPES = {code: np.dtype(t).newbyteorder("<") for code, t in enumerate(
    [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
     np.float16, np.float32, np.float64, np.complex64, np.complex128,
     ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
     # format 1.1 (section 8); code 21 is numpy's one-byte stand-in for packed FP4 pairs
     ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e8m0fnu,
     [("float4_e2m1fn_x2", "u1")], ml_dtypes.complex32], start=1)}
SINCE = {code: 0 if code <= 17 else 1 for code in DTYPES}  # the minor version that added each code
CODECS = (0, 1, 4)  # the codecs this reader decodes: 1.1's, and codec 4 of 1.5
DIGEST_KEY = "__lazystore_digest__"  # section 10.1


def _blake3(data: bytes) -> bytes:
    from blake3 import blake3

    return blake3(data).digest()


DIGESTS = {"blake3": _blake3, "sha256": lambda data: hashlib.sha256(data).digest()}


class SpecError(ValueError):
    pass


class SpecVersionError(SpecError):
    pass


def require(ok, rule: str) -> None:
    if not ok:
        raise SpecError(f"invalid file: rule {rule}")


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def _reject(token: str):
    raise ValueError(f"{token} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if abs(value) == float("inf"):
        raise ValueError(f"{text} overflows a binary64")
    return value


def check_version(major: int, minor: int, rule: str) -> None:
    if major > 1:
        raise SpecVersionError(f"file is format {major}.{minor}; a newer reader is needed")
    require(major >= 1, rule)


class SpecFile:
    def __init__(self, path, tail_bytes: int = 65536, reader_minor: int = READER_MINOR, codecs=CODECS):
        # reader_minor < READER_MINOR plays an older reader: it knows fewer codes.
        # codecs=(0, 1) plays a reader without codec 4.
        self.codes = {code for code in DTYPES if SINCE[code] <= reader_minor}
        self.codecs = set(codecs)
        self.reader_minor = reader_minor
        self.file = open(path, "rb")
        try:
            self._open(tail_bytes)
        except BaseException:
            self.file.close()
            raise

    def _open(self, tail_bytes: int) -> None:
        self.size = S = self.file.seek(0, 2)
        self.reads = 0
        require(S >= 56, "F1")
        tail_start = max(0, S - tail_bytes)
        tail = self.read(tail_start, S - tail_start)
        idx_off, idx_len, idx_sum, major, minor, reserved, magic = struct.unpack("<QQQHHI8s", tail[-40:])
        require(magic == MAGIC, "T1")
        check_version(major, minor, "T2")
        require(reserved == 0, "T3")
        require(idx_len <= 1 << 30, "T4")
        require(idx_len >= 64 and idx_off >= 16 and idx_off + idx_len + 40 == S, "T5")
        self.version, self.index_offset = (major, minor), idx_off
        if idx_off >= tail_start:
            index = tail[idx_off - tail_start : idx_off - tail_start + idx_len]
        else:
            index = self.read(idx_off, idx_len)
        require(xxhash.xxh3_64_intdigest(index) == idx_sum, "I1 (index checksum)")
        esize, csize, T, ndims, nchunks, knb, mnb, A, r1, r2 = struct.unpack_from("<IIQQQQQIIQ", index)
        require(r1 == 0 and r2 == 0, "I2")
        require(esize >= 48 and esize % 8 == 0 and csize >= 16 and csize % 8 == 0, "I3")
        require(8 <= A <= 1 << 30 and A & (A - 1) == 0, "I4")
        require(64 + T * esize + ndims * 8 + nchunks * csize + knb + mnb == idx_len, "I5")
        self.alignment = A
        pos = 64 + T * esize
        dims = struct.unpack_from(f"<{ndims}Q", index, pos)
        pos += ndims * 8
        records = [struct.unpack_from("<QQ", index, pos + j * csize) for j in range(nchunks)]
        # Section 11.4: in records of at least 56 bytes, the digest at offset 24 (meaningful with the member).
        digests = [index[pos + j * csize + 24 : pos + j * csize + 56] if csize >= 56 else None
                   for j in range(nchunks)]
        pos += nchunks * csize
        keys, meta = index[pos : pos + knb], index[pos + knb : pos + knb + mnb]
        # Keys
        require(keys.count(0) == T and (keys[-1:] == b"\0" if T else not keys), "K1")
        try:
            names = keys[:-1].decode("utf-8").split("\0") if T else []
        except UnicodeDecodeError:
            raise SpecError("invalid file: rule K2") from None
        require(len(set(names)) == T, "K3")
        # Entries
        self.entries, dim_pos, chunk_pos, end = {}, 0, 0, align_up(16, A)
        for i, name in enumerate(names):
            (off, stored, nbytes, count, extent, code, codec, ndim, axis, planes,
             res) = struct.unpack_from("<QQQQQBBBBB3s", index, 64 + i * esize)
            require(res == b"\0\0\0", "E1")
            if code not in self.codes and minor > self.reader_minor:  # section 14: a newer minor's code
                raise SpecVersionError(f"file is format {major}.{minor} and uses dtype code {code}, unknown to "
                                       f"this {major}.{self.reader_minor} reader; a newer reader is needed")
            require(code in self.codes, "E2")
            if codec not in self.codecs and minor > self.reader_minor:  # section 14 and E3: a newer minor's codec
                raise SpecVersionError(f"file is format {major}.{minor} and uses codec {codec}, unknown to "
                                       f"this {major}.{self.reader_minor} reader; a newer reader is needed")
            require(codec in self.codecs, "E3")
            item = DTYPES[code].itemsize
            if codec == 4:  # E4 defers to C6: the dtype's plane layout (section 9.5)
                require(minor >= 5 and FLOAT_PLANES.get(code) == planes, "C6")
            else:
                require(planes == 1 or (codec == 1 and planes == item), "E4")
            require(ndim <= 64, "E5")
            require(dim_pos + ndim <= ndims, "E6")
            shape = dims[dim_pos : dim_pos + ndim]
            dim_pos += ndim
            require(all(d < 1 << 62 for d in shape), "E7")
            elements = int(np.prod(shape, dtype=object)) if shape else 1
            require(int(np.prod([max(d, 1) for d in shape], dtype=object)) * item < 1 << 62, "E8")
            require(nbytes == elements * item, "E9")
            require(axis < max(ndim, 1), "E10")
            L = shape[axis] if ndim else 1
            if nbytes == 0:
                require(extent == 0 and axis == 0 and count == 0, "E11")
            else:
                require(1 <= extent <= L, "E12")
                prefix = int(np.prod(shape[:axis], dtype=object)) if axis else 1
                require(count == prefix * -(-L // extent), "E13")
            require(chunk_pos + count <= nchunks, "E14")
            inner = item * (int(np.prod(shape[axis + 1 :], dtype=object)) if ndim > axis + 1 else 1)
            chunks, at = [], off
            chunk_digests = digests[chunk_pos : chunk_pos + count]
            for c in range(count):  # (stored offset, stored len, checksum, decoded offset, decoded len)
                c_stored, c_sum = records[chunk_pos + c]
                nb = -(-L // extent)
                p, b = divmod(c, nb)
                dlen = min(extent, L - b * extent) * inner
                require(c_stored <= idx_off, "C1")
                require(codec != 0 or c_stored == dlen, "C2")
                require(codec == 0 or (c_stored >= header_len(codec, planes) and dlen // 32768 <= c_stored), "C3")
                chunks.append((at, c_stored, c_sum, (p * L + b * extent) * inner, dlen))
                at += c_stored
            chunk_pos += count
            require(at - off == stored, "L2")
            require(off <= idx_off and off == end, "L3")
            end = align_up(off + stored, A)
            self.entries[name] = dict(code=code, dtype=DTYPES[code], shape=tuple(shape), nbytes=nbytes, codec=codec,
                                      planes=planes, axis=axis, extent=extent, offset=off,
                                      stored=stored, chunks=chunks, digests=chunk_digests)
        require(dim_pos == ndims, "E6")
        require(chunk_pos == nchunks, "E14")
        require(sum(r[0] for r in records) <= idx_off, "L1")
        require(end == idx_off, "L4")
        self.metadata = self._metadata(meta)
        self.digest = self._digest_algorithm(minor, csize)
        self.preamble_checked = tail_start == 0
        if self.preamble_checked:
            self.check_preamble(tail)

    def read(self, offset: int, n: int) -> bytes:
        self.reads += 1
        self.file.seek(offset)
        data = self.file.read(n)
        require(len(data) == n, "file shrank")
        return data

    def _digest_algorithm(self, minor: int, csize: int) -> str | None:
        """Rule G1: the algorithm of the chunk digests the metadata declares, or None."""
        member = self.metadata.get(DIGEST_KEY)
        if member is None:
            return None
        require(isinstance(member, dict) and type(member.get("version")) is int and minor >= 4, "G1")
        if member["version"] != 1:  # a newer minor's member: unknown to this reader
            return None
        require(isinstance(member.get("algorithm"), str) and csize >= 56, "G1")
        if member["algorithm"] not in DIGESTS:
            raise SpecVersionError(f"file digests its chunks with {member['algorithm']!r}, unknown to this reader")
        return member["algorithm"]

    def check_digest(self, e: dict, c: int, blob: bytes) -> None:
        """Rule G2, in a file with digests (this reader always verifies)."""
        if self.digest is not None:
            require(DIGESTS[self.digest](blob) == e["digests"][c], "G2 (chunk digest)")

    @staticmethod
    def _metadata(blob: bytes) -> dict:
        if not blob:
            return {}
        try:
            text = blob.decode("utf-8")
            require(not text.startswith("\ufeff"), "M1 (BOM)")
            value = json.loads(text, parse_constant=_reject, parse_float=_finite)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise SpecError("invalid file: rule M1") from None
        require(isinstance(value, dict), "M1 (not an object)")
        return value

    def check_preamble(self, head: bytes) -> None:
        magic, major, minor, reserved = struct.unpack_from("<8sHHI", head)
        require(magic == MAGIC, "P1")
        check_version(major, minor, "P2")
        require(reserved == 0, "P3")
        require((major, minor) == self.version, "P4")
        require(not any(head[16 : align_up(16, self.alignment)]), "P5")

    def decode_chunk(self, e: dict, c: int) -> bytes:
        at, n, checksum, _, dlen = e["chunks"][c]
        blob = self.read(at, n)
        require(xxhash.xxh3_64_intdigest(blob) == checksum, "D1 (chunk checksum)")
        self.check_digest(e, c, blob)
        if e["codec"] == 0:
            return blob
        if e["codec"] == 4:
            return decode_float_planes(blob, e["code"], dlen)
        P = e["planes"]
        lengths = struct.unpack_from(f"<{P}I", blob)
        require(4 * P + sum(lengths) == n, "D2")
        plane_len, pos, out = dlen // P, 4 * P, np.empty((dlen // P, P), np.uint8)
        for j, length in enumerate(lengths):
            plane = blob[pos : pos + length]
            pos += length
            require(length <= plane_len, "D3 (plane longer than decoded)")
            if length < plane_len:
                plane = zstd_plane(plane, plane_len, "D3")
            out[:, j] = np.frombuffer(plane, np.uint8)
        return out.tobytes()

    def _assemble(self, e: dict, chunk_ids) -> np.ndarray:
        buf = bytearray(e["nbytes"])
        for c in chunk_ids:
            chunk = e["chunks"][c]
            buf[chunk[3] : chunk[3] + chunk[4]] = self.decode_chunk(e, c)
        return np.frombuffer(bytes(buf), dtype=e["dtype"]).reshape(e["shape"])

    def tensor(self, name: str) -> np.ndarray:
        e = self.entries[name]
        return self._assemble(e, range(len(e["chunks"])))

    def slice(self, name: str, index: tuple) -> tuple[np.ndarray, list[int]]:
        """Basic index of slices and ints; returns the result and the chunks read (section 13.3)."""
        e = self.entries[name]
        shape, k, ext = e["shape"], e["axis"], e["extent"]
        index = index + (slice(None),) * (len(shape) - len(index))
        sel = [range(*i.indices(d)) if isinstance(i, slice) else range(i % d, i % d + 1)
               for i, d in zip(index, shape)]
        if not e["chunks"] or any(len(s) == 0 for s in sel):
            ids = []
        elif not shape:
            ids = [0]
        else:
            blocks = sorted({j // ext for j in sel[k]})
            grid = shape[:k] + (-(-shape[k] // ext),)
            ids = np.ravel_multi_index(np.ix_(*[list(s) for s in sel[:k]], blocks), grid).ravel().tolist()
        return self._assemble(e, ids)[index], ids

    def verify(self) -> None:
        """V1-V3: every checksum (and digest), every padding byte, the preamble."""
        self.check_preamble(self.read(0, align_up(16, self.alignment)))
        for e in self.entries.values():
            for c, (at, n, checksum, _, _) in enumerate(e["chunks"]):
                blob = self.read(at, n)
                require(xxhash.xxh3_64_intdigest(blob) == checksum, "V1")
                self.check_digest(e, c, blob)
            end = e["offset"] + e["stored"]
            require(not any(self.read(end, align_up(end, self.alignment) - end)), "V2")

    def __enter__(self) -> SpecFile:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def zstd_plane(plane: bytes, plane_len: int, rule: str) -> bytes:
    """A plane stored as one zstd frame (section 9.2), decoded, never past plane_len."""
    try:
        require(zstandard.frame_content_size(plane) in (plane_len, -1), f"{rule} (declared size)")
        d = zstandard.ZstdDecompressor()
        d.decompress(plane, max_output_size=plane_len)  # bounded: fails beyond plane_len
        obj = d.decompressobj()  # now safe: one frame, no trailing bytes, exact size
        out = obj.decompress(plane)
        require(obj.eof and not obj.unused_data and len(out) == plane_len, f"{rule} (one exact frame)")
    except zstandard.ZstdError:
        raise SpecError(f"invalid file: rule {rule} (zstd)") from None
    return out


# -- codec 4 (section 9.5): float planes with a Huffman-coded exponent ---------------

FLOAT_PLANES = {10: 2, 11: 4, 15: 2, 16: 1, 17: 1, 18: 1, 19: 1, 20: 1}  # dtype code -> P (rule C6)


def header_len(codec: int, planes: int) -> int:
    """The bytes before a compressed chunk's planes (rule C3)."""
    return align_up(planes, 4) + 4 * planes if codec == 4 else 4 * planes


def decode_float_planes(blob: bytes, code: int, dlen: int) -> bytes:
    """A codec-4 stored chunk of dtype ``code``, decoded to its dlen bytes (rule D4).
    Also the inner bytes of a codec-132 chunk, once decrypted (section 20)."""
    P, m = FLOAT_PLANES[code], dlen // DTYPES[code].itemsize
    H0 = align_up(P, 4)
    require(len(blob) >= H0 + 4 * P, "D4 (header)")
    modes, lengths = blob[:P], struct.unpack_from(f"<{P}I", blob, H0)
    require(all(mode in (0, 1, 2) for mode in modes), "D4 (mode byte)")
    require(not any(blob[P:H0]), "D4 (pad)")
    require(H0 + 4 * P + sum(lengths) == len(blob), "D4 (plane lengths)")
    planes, pos = [], H0 + 4 * P
    for mode, length in zip(modes, lengths):
        plane = blob[pos : pos + length]
        pos += length
        if mode == 0:
            require(length == m, "D4 (raw plane length)")
        else:
            require(length < m, "D4 (coded plane length)")
            plane = zstd_plane(plane, m, "D4") if mode == 1 else huffman_plane(plane, m)
        planes.append(np.frombuffer(plane, np.uint8).astype(np.uint32))
    return merge_planes(code, planes)


def merge_planes(code: int, p: list[np.ndarray]) -> bytes:
    """Elements from their plane bytes: the inverse formulas of section 9.5's table."""
    if code == 15:
        x = (p[0] & 0x7F) | ((p[0] & 0x80) << 8) | (p[1] << 7)
    elif code == 11:
        x = p[0] | (p[1] << 8) | ((p[2] & 0x7F) << 16) | ((p[2] & 0x80) << 24) | (p[3] << 23)
    elif code == 10:
        x = p[0] | (p[1] << 8)
    else:
        x = p[0]
    return x.astype(f"<u{DTYPES[code].itemsize}").tobytes()


def canonical_codes(symbols: bytes, lengths: list[int]) -> dict[tuple[int, int], int]:
    """(length, code) -> symbol, as deflate assigns them: sorted by (length, symbol),
    consecutive integers, shifted left when the length grows."""
    codes, code, prev = {}, 0, None
    for length, symbol in sorted(zip(lengths, symbols)):
        code <<= length - (prev or length)
        codes[(length, code)] = symbol
        prev, code = length, code + 1
    return codes


def huffman_plane(blob: bytes, n: int) -> bytes:
    """A Huffman plane of n symbols, decoded one bit at a time (section 9.5)."""
    require(len(blob) >= 3, "D4 (Huffman header past the plane)")
    S, lmax, k = blob[0], blob[1], blob[2] + 1
    require(1 <= S <= 8, "D4 (stream count)")
    require(1 <= lmax <= 12, "D4 (Lmax)")
    require(k >= 2, "D4 (fewer than two symbols)")
    T = 3 + k + -(-k // 2)
    require(len(blob) >= T + 4 * (S - 1), "D4 (Huffman table past the plane)")
    symbols = blob[3 : 3 + k]
    require(all(a < b for a, b in zip(symbols, symbols[1:])), "D4 (symbols not ascending)")
    nibbles = [byte >> shift & 15 for byte in blob[3 + k : T] for shift in (0, 4)]
    lengths = nibbles[:k]
    require(not any(nibbles[k:]), "D4 (pad nibble)")
    require(all(1 <= length <= lmax for length in lengths), "D4 (code length out of 1..Lmax)")
    require(sum(1 << (lmax - length) for length in lengths) == 1 << lmax, "D4 (Kraft sum)")
    require(lmax in lengths, "D4 (no code of length Lmax)")
    codes = canonical_codes(symbols, lengths)
    q = -(-n // S)
    require((S - 1) * q < n, "D4 (an empty stream)")
    slens = struct.unpack_from(f"<{S - 1}I", blob, T)
    pos = T + 4 * (S - 1)
    last = len(blob) - pos - sum(slens)
    require(last >= 0, "D4 (stream lengths overrun the plane)")
    out = bytearray()
    for s, slen in enumerate([*slens, last]):
        out += huffman_stream(blob[pos : pos + slen], min((s + 1) * q, n) - s * q, codes, lmax)
        pos += slen
    return bytes(out)


def huffman_stream(stream: bytes, count: int, codes: dict, lmax: int) -> bytes:
    """count symbols from one stream: bits LSB-first in each byte, each code MSB-first."""
    out, i, end = bytearray(), 0, 8 * len(stream)
    for _ in range(count):
        code = length = 0
        while (length, code) not in codes:
            require(i < end, "D4 (stream ends early)")
            code = 2 * code + (stream[i >> 3] >> (i & 7) & 1)
            i, length = i + 1, length + 1
            assert length <= lmax  # a complete code matches within Lmax bits
        out.append(codes[(length, code)])
    require(end - 8 < i, "D4 (stream ends late: a whole byte left over)")
    require(all(stream[j >> 3] >> (j & 7) & 1 == 0 for j in range(i, end)), "D4 (stream ends late: pad bits)")
    return bytes(out)


def spec_load(path) -> tuple[dict[str, np.ndarray], dict]:
    with SpecFile(path) as f:
        return {name: f.tensor(name) for name in f.entries}, f.metadata


# ----------------------------------------------------------------------------
# Tests: files written by lazystore
# ----------------------------------------------------------------------------

ls = pytest.importorskip("lazystore")
DOC = FORMAT_SPEC


def assert_same(ours: dict, theirs: dict) -> None:
    assert list(ours) == list(theirs)
    for name in theirs:
        a, b = ours[name], theirs[name]
        assert (a.dtype, a.shape) == (b.dtype, b.shape), name
        assert a.tobytes() == b.tobytes(), name


def sample_tensors(rng) -> dict[str, np.ndarray]:
    smooth = np.linspace(-3, 3, 600).reshape(20, 30)  # compressible high bytes
    t = {name: smooth.astype(dt) for name, dt in [
        ("f16", np.float16), ("f32", np.float32), ("f64", np.float64), ("bf16", ml_dtypes.bfloat16),
        ("f8e4m3", ml_dtypes.float8_e4m3fn), ("f8e5m2", ml_dtypes.float8_e5m2),
        ("c64", np.complex64), ("c128", np.complex128)]}
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        t[np.dtype(dt).name] = (np.arange(210) % 100).astype(dt).reshape(7, 5, 6)
    t["bool"] = rng.random((9, 13)) > 0.5
    t["noise"] = rng.standard_normal((3, 50)).astype(np.float32)  # chunked on axis 1
    t["deep"] = np.arange(240, dtype=np.float32).reshape(2, 3, 40)  # chunked on axis 2
    t["scalar"] = np.array(2.5, dtype=ml_dtypes.bfloat16)
    t["scalar_i64"] = np.array(-7, dtype=np.int64)
    t["empty"] = np.zeros((0,), dtype=np.float32)
    t["empty_3d"] = np.zeros((3, 0, 2), dtype=np.int16)
    t["big_row"] = np.arange(100, dtype=np.float64).reshape(1, 100)
    t["long"] = np.linspace(0, 1, 4096, dtype=np.float32).reshape(8, 512)  # many compressed chunks
    return t


def sample_1_1_tensors() -> dict[str, np.ndarray]:
    """One tensor of each format 1.1 dtype (codes 18-22), chunked and compressible."""
    smooth = np.linspace(-3, 3, 600).reshape(20, 30)
    t = {name: smooth.astype(dt) for name, dt in [
        ("f8e4m3fnuz", ml_dtypes.float8_e4m3fnuz), ("f8e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
        ("c32", ml_dtypes.complex32)]}
    t["scales"] = np.exp2(np.arange(-20, 40) % 7).astype(ml_dtypes.float8_e8m0fnu).reshape(6, 10)
    t["fp4"] = (np.arange(300) % 9).astype(np.uint8).view(DTYPES[21]).reshape(10, 30)
    t["scalar_fp4"] = np.array(0x21, np.uint8).view(DTYPES[21])
    return t


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("chunk_bytes", [64, 1024, 1 << 20])
def test_decodes_like_lazystore(tmp_path, compression, chunk_bytes):
    path = tmp_path / "t.lzy"
    meta = {"step": 10, "name": "μ-model", "cfg": {"lr": 1e-3, "layers": [1, 2]}}
    ls.save(sample_tensors(np.random.default_rng(0)), path, compression=compression,
            metadata=meta, chunk_bytes=chunk_bytes)
    ours, our_meta = spec_load(path)
    assert_same(ours, ls.load(path))
    with ls.open(path) as ck:
        assert our_meta == meta == ck.metadata
    with SpecFile(path) as f:
        f.verify()
        entries = list(f.entries.values())
    codecs = {e["codec"] for e in entries}
    assert codecs == ({0, 1} if compression else {0})  # zstd for some, raw fallback for others
    if chunk_bytes == 64:
        assert max(len(e["chunks"]) for e in entries) > 10
        assert {e["axis"] for e in entries} >= {0, 1, 2}
    for e in entries:  # the writer follows the grid recommendation of section 15
        assert (e["axis"], e["extent"]) == recommended_grid(e["shape"], e["dtype"].itemsize, chunk_bytes)


def recommended_grid(shape, itemsize, B):
    if 0 in shape:
        return 0, 0
    if not shape:
        return 0, 1
    k, inner = len(shape) - 1, itemsize
    while k > 0 and inner * shape[k] <= B:
        inner, k = inner * shape[k], k - 1
    return k, max(1, min(shape[k], B // inner))


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_slices_read_only_touched_chunks(tmp_path, compression):
    path = tmp_path / "s.lzy"
    arrays = {"m": np.arange(7 * 5 * 6, dtype=np.float32).reshape(7, 5, 6) // 3,
              "v": np.arange(1000, dtype=np.int32) // 7, "s": np.array(3, np.uint16)}
    ls.save(arrays, path, compression=compression, chunk_bytes=64)
    with SpecFile(path) as f, ls.open(path) as ck:
        for name, index in [("m", (2,)), ("m", (slice(1, 6, 2), 3)), ("m", (slice(None), slice(None), 4)),
                            ("m", (-1, slice(4, 1, -1))), ("v", (slice(990, None),)), ("v", (slice(5, 5),)),
                            ("s", ())]:
            got, ids = f.slice(name, index)
            want = ck.get_slice(name)[index]
            assert np.array_equal(got, want) and np.array_equal(got, arrays[name][index])
            if index != (slice(None), slice(None), 4):  # the chunk axis is 1: every chunk spans axis 2
                assert len(ids) < len(f.entries[name]["chunks"]) or name == "s"


def test_single_plane_zstd(tmp_path):
    class OnePlane(ls.ZstdPlanes):  # codec 1 with planes = 1 (rule E4 allows it)
        def planes_for(self, itemsize):
            return 1

    path = tmp_path / "p.lzy"
    arrays = {"a": np.zeros((64, 64), np.float32), "b": np.arange(4096, dtype=np.int64) % 5}
    ls.save(arrays, path, compression=OnePlane(), chunk_bytes=4096)
    with SpecFile(path) as f:
        assert {(e["codec"], e["planes"]) for e in f.entries.values()} == {(1, 1)}
    assert_same(spec_load(path)[0], ls.load(path))


@pytest.mark.parametrize("alignment", [8, 16, 4096])
def test_alignments(tmp_path, alignment):
    path = tmp_path / "a.lzy"
    with ls.Writer(path, alignment=alignment, compression="zstd") as w:
        w.add("x", np.arange(33, dtype=np.uint8))
        w.add("y", np.ones((4, 4), np.float64), compression=None)
    with SpecFile(path) as f:
        assert f.alignment == alignment and all(e["offset"] % alignment == 0 for e in f.entries.values())
        f.verify()
    assert_same(spec_load(path)[0], ls.load(path))


def test_empty_checkpoint_and_odd_keys(tmp_path):
    ls.save({}, tmp_path / "e.lzy")
    assert spec_load(tmp_path / "e.lzy") == ({}, {})
    ls.save({}, tmp_path / "m.lzy", metadata={"only": "metadata"})
    assert spec_load(tmp_path / "m.lzy") == ({}, {"only": "metadata"})
    arrays = {"": np.ones(2), "é/ü.weight": np.zeros(3), "e\u0301": np.ones(1), "日本": np.arange(3)}
    ls.save(arrays, tmp_path / "k.lzy")
    assert_same(spec_load(tmp_path / "k.lzy")[0], ls.load(tmp_path / "k.lzy"))


@pytest.mark.slow
def test_index_in_one_or_two_reads(tmp_path):
    ls.save({"a": np.zeros(10)}, tmp_path / "small.lzy")
    with SpecFile(tmp_path / "small.lzy") as f:
        assert f.reads == 1 and f.preamble_checked
    many = {f"layer{i}.weight": np.full((2, 2), i, np.float32) for i in range(1500)}
    ls.save(many, tmp_path / "big.lzy")  # index of ~100 KiB: larger than the tail read
    with SpecFile(tmp_path / "big.lzy") as f:
        assert f.reads == 2 and f.size - f.index_offset > 65536 and not f.preamble_checked
        assert_same({n: f.tensor(n) for n in f.entries}, ls.load(tmp_path / "big.lzy"))


# -- rewriting files at the byte level, from the spec -----------------------------


def rewrite(src, dst, *, version=None, extra_entry=0, extra_record=0, index_edit=None) -> None:
    """Copy ``src`` to ``dst`` with its index re-encoded (wider records, another
    version, an edit) and its checksum fixed. Never rewrites a file in place."""
    data = bytearray(Path(src).read_bytes())
    off, length, _, major, minor, _, _ = struct.unpack_from("<QQQHHI8s", data, len(data) - 40)
    index = bytes(data[off : off + length])
    esize, csize, T, nd, nc, *rest = struct.unpack_from("<IIQQQQQIIQ", index)
    entries = b"".join(index[64 + i * esize : 64 + (i + 1) * esize] + b"\xab" * extra_entry for i in range(T))
    pos = 64 + T * esize
    dims, pos = index[pos : pos + 8 * nd], pos + 8 * nd
    recs = b"".join(index[pos + j * csize : pos + (j + 1) * csize] + b"\xcd" * extra_record for j in range(nc))
    tail = index[pos + nc * csize :]
    header = struct.pack("<IIQQQQQIIQ", esize + extra_entry, csize + extra_record, T, nd, nc, *rest)
    index = bytearray(header + entries + dims + recs + tail)
    if index_edit:
        index_edit(index)
    major, minor = version or (major, minor)
    struct.pack_into("<HH", data, 8, major, minor)
    trailer = struct.pack("<QQQHHI8s", off, len(index), xxhash.xxh3_64_intdigest(index), major, minor, 0, MAGIC)
    Path(dst).write_bytes(bytes(data[:off]) + bytes(index) + trailer)


def test_newer_minor_with_wider_records(tmp_path):
    ls.save(sample_tensors(np.random.default_rng(1)), tmp_path / "v10.lzy", compression="zstd", chunk_bytes=64)
    expected = ls.load(tmp_path / "v10.lzy")
    path = tmp_path / "v16.lzy"  # newer than both readers (1.1 and lazystore's 1.5)
    rewrite(tmp_path / "v10.lzy", path, version=(1, 6), extra_entry=8, extra_record=16)
    with SpecFile(path) as f:
        assert f.version == (1, 6) and f.size > (tmp_path / "v10.lzy").stat().st_size
        f.verify()
    assert_same(spec_load(path)[0], expected)
    assert_same(ls.load(path), expected)


def test_newer_major_is_refused_with_upgrade_message(tmp_path):
    path = tmp_path / "v2.lzy"
    ls.save({"a": np.zeros(3)}, tmp_path / "v1.lzy")
    rewrite(tmp_path / "v1.lzy", path, version=(2, 0))
    with pytest.raises(SpecVersionError, match="2.0.*newer reader"):
        SpecFile(path)
    with pytest.raises(ls.UnsupportedVersionError, match="upgrade"):
        ls.open(path)


def test_both_readers_refuse_corruption(tmp_path):
    path = tmp_path / "c.lzy"
    ls.save({"a": np.linspace(0, 1, 4096, dtype=np.float32)}, path, compression="zstd", chunk_bytes=1024)
    clean = path.read_bytes()
    with SpecFile(path) as f:
        e, index_offset = f.entries["a"], f.index_offset
    assert e["codec"] == 1
    # Each variant gets its own file: lazystore may still be reading a file it
    # failed on from other threads, so rewriting it in place could crash.
    for i, (where, rule) in enumerate([(e["chunks"][1][0] + 5, "D1"), (index_offset + 70, "I1"),
                                       (len(clean) - 3, "T1")]):
        bad = bytearray(clean)
        bad[where] ^= 0x40
        (tmp_path / f"bad{i}.lzy").write_bytes(bad)
        with pytest.raises(SpecError, match=rule), SpecFile(tmp_path / f"bad{i}.lzy") as f:
            f.tensor("a")
        with pytest.raises(ls.FormatError):
            ls.load(tmp_path / f"bad{i}.lzy")
    bad = bytearray(clean)  # nonzero padding: only verification notices
    bad[e["offset"] + e["stored"]] = 1
    (tmp_path / "pad.lzy").write_bytes(bad)
    with pytest.raises(SpecError, match="V2"), SpecFile(tmp_path / "pad.lzy") as f:
        f.verify()
    with ls.open(tmp_path / "pad.lzy") as ck:
        assert ck.verify() == ["a"]
    lie = tmp_path / "lie.lzy"  # an index that breaks a grid rule, checksum fixed
    rewrite(path, lie, index_edit=lambda ix: struct.pack_into("<Q", ix, 64 + 32, 3))  # chunk_extent
    with pytest.raises(SpecError, match="E13"):
        SpecFile(lie)
    # lazystore checks an entry's rules on its first use (format.md §13.1).
    with ls.open(lie) as ck, pytest.raises(ls.FormatError, match="chunk count"):
        ck["a"]


def test_reads_the_golden_file():
    golden = DATA / "golden_v1.lzy"
    if not golden.exists():
        pytest.skip("no golden file")
    with SpecFile(golden) as f:
        f.verify()
        assert f.version == (1, 0) and 1 in {e["codec"] for e in f.entries.values()}
        with ls.open(golden) as ck:
            assert f.metadata == ck.metadata
    assert_same(spec_load(golden)[0], ls.load(golden))


@pytest.mark.parametrize("meta, ok", [(b'{"a":1e308}', True), (b'{"a":1e400}', False), (b'{"a":NaN}', False),
                                      (b"[1]", False), (b'\xef\xbb\xbf{}', False), (b' { } ', True)])
def test_metadata_rules(tmp_path, meta, ok):
    src = tmp_path / "m0.lzy"
    ls.save({"a": np.zeros(2)}, src)
    path = tmp_path / "m.lzy"
    data = src.read_bytes()
    off, length = struct.unpack_from("<QQ", data, len(data) - 40)
    index = bytearray(data[off : off + length] + meta)  # metadata is the last section, empty so far
    struct.pack_into("<Q", index, 40, len(meta))  # metadata_nbytes
    trailer = struct.pack("<QQQHHI8s", off, len(index), xxhash.xxh3_64_intdigest(index), 1, 0, 0, MAGIC)
    path.write_bytes(bytes(data[:off]) + bytes(index) + trailer)
    if ok:
        with SpecFile(path) as f, ls.open(path) as ck:
            assert f.metadata == ck.metadata == json.loads(meta)
    else:
        with pytest.raises(SpecError, match="M1"):
            SpecFile(path)
        with pytest.raises(ls.FormatError):
            ls.open(path)


def annotated_bytes(marker: str) -> bytes:
    """The bytes an annotated dump in docs/format.md between
    ``<!-- marker: begin`` and ``<!-- marker: end`` spells out: lines of an
    offset (checked), hex bytes or ``00 × N``, then the annotation."""
    text = DOC.read_text(encoding="utf-8")
    block = text.split(f"<!-- {marker}: begin")[1].split(f"<!-- {marker}: end")[0]
    expected, pos = bytearray(), 0
    for line in block.splitlines():
        m = re.match(r"^([0-9a-f]{4})  ((?:[0-9a-f]{2})(?: [0-9a-f]{2})*)(?: × (\d+))?(?:  |$)", line)
        if m:
            assert int(m[1], 16) == pos, line
            chunk = bytes.fromhex(m[2]) * int(m[3] or 1)
            expected += chunk
            pos += len(chunk)
    return bytes(expected)


def test_worked_example_matches_writer(tmp_path):
    """The annotated bytes in docs/format.md section 16 are what lazystore writes."""
    path = tmp_path / "example.lzy"
    ls.save({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "step": np.array(7, dtype=np.int16)},
            path, metadata={"epoch": 3}, chunk_bytes=16)
    assert path.read_bytes() == annotated_bytes("worked-example")
    tensors, meta = spec_load(path)
    assert meta == {"epoch": 3} and tensors["step"].shape == () and tensors["step"] == 7
    assert tensors["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


# -- format 1.1 ---------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("chunk_bytes", [64, 1 << 20])
def test_decodes_1_1_dtypes_like_lazystore(tmp_path, compression, chunk_bytes):
    path = tmp_path / "v11.lzy"
    ls.save(sample_1_1_tensors(), path, compression=compression, chunk_bytes=chunk_bytes)
    tensors, _ = spec_load(path)
    with SpecFile(path) as f:
        assert f.version == (1, 1)
        f.verify()
    assert_same(tensors, ls.load(path))
    assert_same(tensors, sample_1_1_tensors())


def test_reads_the_golden_1_1_file():
    golden = DATA / "golden_v1_1.lzy"
    with SpecFile(golden) as f:
        f.verify()
        assert f.version == (1, 1) and f.entries["fp4"]["dtype"] == DTYPES[21]
    assert_same(spec_load(golden)[0], ls.load(golden))


def test_a_1_0_reader_refuses_a_1_1_file_and_says_why():
    with pytest.raises(SpecVersionError, match=r"format 1\.1 and uses dtype code 18.*newer reader"):
        SpecFile(DATA / "golden_v1_1.lzy", reader_minor=0)
    with SpecFile(DATA / "golden_v1.lzy", reader_minor=0) as f:  # while 1.0 files stay its own
        f.verify()


def test_a_1_1_reader_refuses_a_1_2_delta_file_and_says_why():
    # This reader implements 1.1 (delta files, codec 2, are 1.2): it must
    # say that a newer reader is needed, not that the file is corrupt.
    with pytest.raises(SpecVersionError, match=r"format 1\.2 and uses codec 2.*newer reader"):
        SpecFile(DATA / "golden_v1_2.lzy")
    with SpecFile(DATA / "golden_v1_2_base.lzy") as f:  # its base is an ordinary file
        f.verify()


def test_a_1_1_reader_refuses_a_1_3_delta_file_and_says_why():
    # Codec 3 (a delta against a base identified by content) is 1.3. Its
    # chunk records are wider (24 bytes) and its base member is the 1.2 one,
    # so an older reader gets as far as the codec and names the version.
    with pytest.raises(SpecVersionError, match=r"format 1\.3 and uses codec 3.*newer reader"):
        SpecFile(DATA / "golden_v1_3.lzy")
    with SpecFile(DATA / "golden_v1_3_base.lzy") as f:
        f.verify()


@pytest.mark.parametrize("version", [(1, 3), (1, 2), (1, 1), (1, 0)])
def test_unknown_dtype_code_is_a_newer_version_only_in_a_newer_file(tmp_path, version):
    # Entry 0 ("fnuz_e4m3") given code 23, which no version defines yet. A
    # reader implementing 1.n calls it a newer version's code in a file newer than 1.n.
    path = tmp_path / "u.lzy"
    rewrite(DATA / "golden_v1_1.lzy", path, version=version, index_edit=lambda ix: ix.__setitem__(64 + 40, 23))
    if version[1] > READER_MINOR:
        with pytest.raises(SpecVersionError, match=rf"format 1\.{version[1]} and uses dtype code 23"):
            SpecFile(path)
    else:
        with pytest.raises(SpecError, match="E2"):
            SpecFile(path)
    if version[1] > ls.FORMAT_MINOR:
        with ls.open(path) as ck, pytest.raises(ls.UnsupportedVersionError, match=rf"format 1\.{version[1]}.*upgrade"):
            ck["fnuz_e4m3"]
    else:
        with ls.open(path) as ck, pytest.raises(ls.FormatError, match="unknown dtype code 23") as exc:
            ck["fnuz_e4m3"]
        assert not isinstance(exc.value, ls.UnsupportedVersionError)
    with ls.open(path) as ck:  # the other tensors still read: entries are checked on first use
        assert ck["w"].tolist() == [1.0, -1.0]


# -- format 1.4: chunk digests (section 10.1) --------------------------------------------


@pytest.mark.parametrize("algorithm", sorted(DIGESTS))
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_decodes_files_with_digests_like_lazystore(tmp_path, algorithm, compression):
    path = tmp_path / "d.lzy"
    ls.save(sample_tensors(np.random.default_rng(2)), path, compression=compression, chunk_bytes=256,
            digest=algorithm)
    with SpecFile(path) as f:
        assert f.version == (1, 4) and f.digest == algorithm
        f.verify()  # every chunk's digest, with this reader's own hashlib / blake3
    assert_same(spec_load(path)[0], ls.load(path))


def test_both_readers_refuse_a_chunk_whose_xxh3_was_recomputed(tmp_path):
    path = tmp_path / "d.lzy"
    ls.save({"a": np.arange(1024, dtype=np.int32)}, path, digest="sha256", chunk_bytes=1024)
    with SpecFile(path) as f:
        at = f.entries["a"]["chunks"][2][0]
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF

    def fix_checksum(index: bytearray) -> None:  # the chunk's xxh3, in its record (chunk 2, 56-byte records)
        record = 64 + 48 + 8 + 2 * 56
        struct.pack_into("<Q", index, record + 8, xxhash.xxh3_64_intdigest(bytes(data[at : at + 1024])))

    (tmp_path / "flipped.lzy").write_bytes(bytes(data))
    rewrite(tmp_path / "flipped.lzy", tmp_path / "bad.lzy", index_edit=fix_checksum)
    with pytest.raises(SpecError, match="G2"), SpecFile(tmp_path / "bad.lzy") as f:
        f.tensor("a")
    with pytest.raises(ls.DigestError, match="tensor 'a' chunk 2"):
        ls.load(tmp_path / "bad.lzy")


# -- format 1.5: codec 4 (section 9.5) ---------------------------------------------------
# Hand-built codec-4 chunks and files, the worked example's bytes and every D4 refusal
# are in test_spec_codec_4.py; here, files lazystore writes.

# The 1.5 golden files (design 29 section 7), one entry each once they are committed:
# tests/properties/test_golden_huffman.py freezes their bytes; this reads them from the spec.
# golden_v1_5_sealed.lzy (codec 132) needs the key: test_golden_sealed.py's spec_open
# decrypts it, and decode_float_planes above decodes its inner chunks.
GOLDENS_1_5 = ["golden_v1_5_huffman.lzy"]


@pytest.mark.parametrize("name", GOLDENS_1_5)
def test_reads_the_golden_1_5_files(name):
    golden = DATA / name
    if not golden.exists():
        pytest.skip(f"{name} is made once lazystore writes codec 4")
    with SpecFile(golden) as f:
        f.verify()
        assert f.version == (1, 5) and 4 in {e["codec"] for e in f.entries.values()}
    assert_same(spec_load(golden)[0], ls.load(golden))


def float_tensors() -> dict[str, np.ndarray]:
    """sample_tensors' and sample_1_1_tensors' tensors of codec 4's dtypes (section 9.5)."""
    every = {**sample_tensors(np.random.default_rng(3)), **sample_1_1_tensors()}
    codes = {dt: code for code, dt in DTYPES.items() if code in FLOAT_PLANES}
    return {name: t for name, t in every.items() if t.dtype in codes}


@pytest.mark.skipif(ls.FORMAT_MINOR < 5, reason="lazystore writes codec 4 from format 1.5")
@pytest.mark.parametrize("chunk_bytes", [64, 4096, 1 << 20])
def test_decodes_huffman_files_like_lazystore(tmp_path, chunk_bytes):
    path = tmp_path / "h.lzy"
    ls.save(float_tensors(), path, compression="huffman", chunk_bytes=chunk_bytes)
    with SpecFile(path) as f:
        f.verify()
        assert f.version == (1, 5) and 4 in {e["codec"] for e in f.entries.values()}
    assert_same(spec_load(path)[0], ls.load(path))
    assert_same(spec_load(path)[0], float_tensors())
