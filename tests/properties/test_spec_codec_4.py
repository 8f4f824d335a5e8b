"""Codec 4 (format 1.5, docs/format.md §9.5) through the spec reader of
test_spec_reader.py, on chunks and files built here from the spec alone.

The encoder below is written from §9.5's text, apart from the reader's (it
assigns canonical codes the way RFC 1951 §3.2.2 spells it out, with
``bl_count`` and ``next_code``), so a round trip checks one reading of the
spec against another, and the worked example's hex dump, parsed out of
format.md, pins both to the bytes the spec shows. Files are built byte by
byte from §3-§12 (one tensor, chunked on axis 0). Where lazystore itself
reads codec 4 (format 1.5), each file and each refusal is checked against it
too.
"""

from __future__ import annotations

import heapq
import re
import struct
from collections import Counter
from itertools import count

import ml_dtypes
import numpy as np
import pytest
import xxhash
import zstandard

import lazystore as ls
from tests.properties.test_spec_reader import (
    DTYPES,
    FLOAT_PLANES,
    MAGIC,
    SpecError,
    SpecFile,
    SpecVersionError,
    align_up,
    annotated_bytes,
    decode_float_planes,
)

LAZYSTORE_HAS_CODEC_4 = ls.FORMAT_MINOR >= 5  # before the writer lands, only the spec reader is checked

# -- a tiny encoder, from section 9.5 ------------------------------------------------


def split_planes(code: int, data: bytes) -> list[bytes]:
    """The plane bytes of every element, per section 9.5's layout table."""
    x = np.frombuffer(data, f"<u{DTYPES[code].itemsize}").astype(np.uint32)
    if code == 15:
        planes = [(x & 0x7F) | ((x >> 8) & 0x80), (x >> 7) & 0xFF]
    elif code == 11:
        planes = [x & 0xFF, (x >> 8) & 0xFF, ((x >> 16) & 0x7F) | ((x >> 24) & 0x80), (x >> 23) & 0xFF]
    elif code == 10:
        planes = [x & 0xFF, x >> 8]
    else:
        planes = [x]
    return [p.astype(np.uint8).tobytes() for p in planes]


def huffman_lengths(plane: bytes, limit: int = 12) -> dict[int, int]:
    """Huffman code lengths of the plane's bytes, no longer than ``limit``: the
    counts are halved (never to 0) until the longest code fits."""
    counts = Counter(plane)
    while True:
        tie = count()
        heap = [(n, next(tie), [symbol]) for symbol, n in counts.items()]
        depth = dict.fromkeys(counts, 0)
        heapq.heapify(heap)
        while len(heap) > 1:
            n1, _, a = heapq.heappop(heap)
            n2, _, b = heapq.heappop(heap)
            for symbol in a + b:
                depth[symbol] += 1
            heapq.heappush(heap, (n1 + n2, next(tie), a + b))
        if max(depth.values()) <= limit:
            return depth
        counts = Counter({symbol: -(-n // 2) for symbol, n in counts.items()})


def deflate_codes(lengths: dict[int, int]) -> dict[int, str]:
    """symbol -> its code as a bit string, MSB first (RFC 1951 section 3.2.2)."""
    bl_count = Counter(lengths.values())
    code, next_code = 0, {}
    for bits in range(1, max(lengths) + 1):
        code = (code + bl_count[bits - 1]) << 1 if bits > 1 else 0
        next_code[bits] = code
    codes = {}
    for symbol in sorted(lengths):
        length = lengths[symbol]
        codes[symbol] = format(next_code[length], f"0{length}b")
        next_code[length] += 1
    return codes


def pack_bits(bits: str) -> bytes:
    """Bit i of the string is bit i mod 8 of byte i // 8 (LSB-first); zero pad bits."""
    out = bytearray(-(-len(bits) // 8))
    for i, bit in enumerate(bits):
        out[i // 8] |= (bit == "1") << (i % 8)
    return bytes(out)


def huffman_plane_bytes(plane: bytes, lengths: dict[int, int], streams: int) -> bytes:
    n, k, lmax = len(plane), len(lengths), max(lengths.values())
    nibbles = [lengths[s] for s in sorted(lengths)] + [0] * (k % 2)
    header = bytes([streams, lmax, k - 1, *sorted(lengths)])
    header += bytes(lo | hi << 4 for lo, hi in zip(nibbles[::2], nibbles[1::2]))
    codes, q = deflate_codes(lengths), -(-n // streams)
    coded = [pack_bits("".join(codes[s] for s in plane[i * q : (i + 1) * q])) for i in range(streams)]
    return header + b"".join(struct.pack("<I", len(c)) for c in coded[:-1]) + b"".join(coded)


def allowed_streams(n: int, wanted: int) -> int:
    """The largest S <= wanted whose every stream codes a symbol: (S - 1) * ceil(n / S) < n."""
    return next(s for s in range(wanted, 0, -1) if (s - 1) * -(-n // s) < n)


def encode_plane(plane: bytes, mode: int, streams: int) -> tuple[int, bytes]:
    """(mode, stored plane): the mode asked for if it is valid and strictly shorter, else raw."""
    if mode == 2:
        lengths = huffman_lengths(plane)
        if len(lengths) >= 2:
            coded = huffman_plane_bytes(plane, lengths, allowed_streams(len(plane), streams))
            if len(coded) < len(plane):
                return 2, coded
    if mode == 1:
        coded = zstandard.ZstdCompressor(level=3).compress(plane)
        if len(coded) < len(plane):
            return 1, coded
    return 0, plane


def stored_chunk(modes, planes: list[bytes]) -> bytes:
    """Mode bytes, zero pad to a multiple of 4, u32 lengths, then the planes."""
    P = len(planes)
    return (bytes(modes) + bytes(align_up(P, 4) - P) + struct.pack(f"<{P}I", *map(len, planes))
            + b"".join(planes))


def encode_chunk(code: int, data: bytes, modes, streams: int = 4) -> bytes:
    coded = [encode_plane(plane, mode, streams) for plane, mode in zip(split_planes(code, data), modes)]
    return stored_chunk([mode for mode, _ in coded], [plane for _, plane in coded])


# -- a one-tensor file, from sections 3-12 -------------------------------------------


def build_file(path, code: int, shape: tuple, extent: int, chunks: list[bytes], *, codec: int = 4,
               planes: int | None = None, minor: int = 5, name: str = "t") -> None:
    """One tensor chunked on axis 0, ``chunks`` its stored chunks, every checksum right."""
    planes = FLOAT_PLANES.get(code, 1) if planes is None else planes
    key, data = name.encode() + b"\0", b"".join(chunks)
    nbytes = int(np.prod(shape)) * DTYPES[code].itemsize
    index_offset = align_up(64 + len(data), 64)
    index = struct.pack("<IIQQQQQIIQ", 48, 16, 1, len(shape), len(chunks), len(key), 0, 64, 0, 0)
    index += struct.pack("<QQQQQBBBBB3s", 64, len(data), nbytes, len(chunks), extent, code, codec, len(shape),
                         0, planes, bytes(3))
    index += struct.pack(f"<{len(shape)}Q", *shape)
    index += b"".join(struct.pack("<QQ", len(c), xxhash.xxh3_64_intdigest(c)) for c in chunks) + key
    preamble = MAGIC + struct.pack("<HHI", 1, minor, 0)
    trailer = struct.pack("<QQQHHI8s", index_offset, len(index), xxhash.xxh3_64_intdigest(index), 1, minor, 0, MAGIC)
    path.write_bytes(preamble.ljust(64, b"\0") + data.ljust(index_offset - 64, b"\0") + index + trailer)


def codec_4_file(path, array: np.ndarray, extent: int, modes, streams: int = 4) -> None:
    code = next(c for c, dt in DTYPES.items() if dt == array.dtype)
    rows = [array[i : i + extent].tobytes() for i in range(0, array.shape[0], extent)]
    build_file(path, code, array.shape, extent, [encode_chunk(code, row, modes, streams) for row in rows])


def modes_of(path) -> set[tuple[int, ...]]:
    with SpecFile(path) as f:
        e = f.entries["t"]
        return {tuple(f.read(at, n)[: e["planes"]]) for at, n, *_ in e["chunks"]}


# -- the worked example of section 9.5 -----------------------------------------------

EXAMPLE = np.array([1.0, 1.5, -0.75, 1.25, 2.0, -1.0, 0.5, 1.75, 1.0, -1.5,
                    0.625, 1.125, 3.0, -1.0, 1.0, 0.875, 1.5, -1.25, 1.0, -0.5], dtype=ml_dtypes.bfloat16)


def test_the_worked_example_decodes_to_its_values():
    blob = annotated_bytes("codec-4-example")
    assert len(blob) == 48
    assert decode_float_planes(blob, 15, EXAMPLE.nbytes) == EXAMPLE.tobytes()


def test_the_encoder_writes_the_worked_example():
    plane0, plane1 = split_planes(15, EXAMPLE.tobytes())
    lengths = huffman_lengths(plane1)
    assert lengths == {0x7E: 2, 0x7F: 1, 0x80: 2}
    assert deflate_codes(lengths) == {0x7F: "0", 0x7E: "10", 0x80: "11"}
    chunk = stored_chunk([0, 2], [plane0, huffman_plane_bytes(plane1, lengths, 2)])
    assert chunk == annotated_bytes("codec-4-example")


# -- round trips through files -------------------------------------------------------


def sample(dtype, n: int, rng) -> np.ndarray:
    """Trained-weight-like values plus the special ones: signed zeros, infinities, NaN, subnormals."""
    values = (rng.standard_normal(n) * 0.05).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-42, 3.0e38], np.float32)
    values[: len(special)] = special
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(dtype)


def assert_reads_back(path, array: np.ndarray) -> None:
    with SpecFile(path) as f:
        assert f.version == (1, 5) and f.entries["t"]["codec"] == 4
        f.verify()
        got = f.tensor("t")
    assert got.dtype == array.dtype and got.tobytes() == array.tobytes()
    if LAZYSTORE_HAS_CODEC_4:
        assert ls.load(path)["t"].tobytes() == array.tobytes()


FLOAT_DTYPES = {code: DTYPES[code] for code in FLOAT_PLANES}


@pytest.mark.parametrize("code", sorted(FLOAT_DTYPES))
@pytest.mark.parametrize("streams", [1, 3, 4, 8])
def test_every_dtype_round_trips_with_a_huffman_exponent(tmp_path, code, streams):
    array = sample(DTYPES[code], 3500, np.random.default_rng(code)).reshape(700, 5)
    P = FLOAT_PLANES[code]
    path = tmp_path / "f.lzy"
    codec_4_file(path, array, extent=240, modes=[1] * (P - 1) + [2], streams=streams)  # chunks of 1200, 1200, 1100
    assert all(modes[-1] == 2 for modes in modes_of(path))  # the exponent plane is Huffman in every chunk
    assert_reads_back(path, array)


def test_a_chunk_with_all_three_modes(tmp_path):
    rng = np.random.default_rng(5)
    array = sample(np.float32, 4096, rng)
    array = (array.view(np.uint32) & np.uint32(0xFFFFFF00)).view(np.float32)  # plane 0 all zero: zstd
    path = tmp_path / "f.lzy"
    codec_4_file(path, array, extent=4096, modes=[1, 1, 2, 2])  # plane 2 (sign, m22..m16) stays raw
    assert modes_of(path) == {(1, 0, 0, 2)}
    assert_reads_back(path, array)


def test_a_plane_of_one_byte_is_stored_as_zstd_not_huffman(tmp_path):
    array = np.full((64, 8), 1.5, ml_dtypes.bfloat16)
    path = tmp_path / "f.lzy"
    codec_4_file(path, array, extent=64, modes=[2, 2])  # k = 1: no Huffman plane, and raw is no shorter
    assert modes_of(path) == {(0, 0)}
    assert_reads_back(path, array)


# -- entry rules C3 and C6, E3 ---------------------------------------------------------


def good_chunk() -> bytes:
    return encode_chunk(15, EXAMPLE.tobytes(), [0, 2], streams=2)


@pytest.mark.parametrize("code, planes, minor", [(15, 2, 4), (15, 1, 5), (11, 2, 5), (12, 8, 5), (4, 4, 5)])
def test_c6_codec_4_only_for_float_layouts_in_a_1_5_file(tmp_path, code, planes, minor):
    path = tmp_path / "c6.lzy"
    build_file(path, code, (20 * 2 // DTYPES[code].itemsize,), 20 * 2 // DTYPES[code].itemsize,
               [good_chunk()], planes=planes, minor=minor)
    with pytest.raises(SpecError, match="C6"):
        SpecFile(path)
    if LAZYSTORE_HAS_CODEC_4:  # corruption, not a newer version's codec: lazystore knows codec 4
        with ls.open(path) as ck, pytest.raises(ls.FormatError) as exc:
            ck["t"]
        assert not isinstance(exc.value, ls.UnsupportedVersionError)


def test_c3_a_chunk_shorter_than_its_header(tmp_path):
    path = tmp_path / "c3.lzy"
    build_file(path, 15, (20,), 20, [bytes([2, 2, 0, 0]) + bytes(7)])  # 11 bytes < 4 + 8
    with pytest.raises(SpecError, match="C3"):
        SpecFile(path)


def test_a_reader_without_codec_4_says_a_newer_reader_is_needed(tmp_path):
    path = tmp_path / "new.lzy"
    build_file(path, 15, (20,), 20, [good_chunk()])
    with pytest.raises(SpecVersionError, match=r"format 1\.5 and uses codec 4.*newer reader"):
        SpecFile(path, codecs=(0, 1))
    assert_reads_back(path, EXAMPLE)


# -- rule D4: what a reader must refuse (section 9.5's list) -----------------------------

N = 64  # symbols of the one-plane (float8_e4m3fn) chunks below: enough for every coded plane to be shorter
PLANE = bytes([0x30] * 40 + [0x38] * 16 + [0x40] * 8)  # lengths 1, 2, 2 (canonical 0, 10, 11)
LENGTHS = {0x30: 1, 0x38: 2, 0x40: 2}


def huffman(streams: int = 2, lengths=LENGTHS, plane: bytes = PLANE) -> bytearray:
    return bytearray(huffman_plane_bytes(plane, lengths, streams))


def fp8(plane: bytes, mode: int = 2) -> bytes:
    return stored_chunk([mode], [bytes(plane)])


def with_streams(table: bytes, *streams: bytes) -> bytes:
    """A Huffman plane from a header and table, and its streams (lengths computed)."""
    return table + b"".join(struct.pack("<I", len(s)) for s in streams[:-1]) + b"".join(streams)


TABLE = bytes([2, 2, 2, 0x30, 0x38, 0x40, 0x21, 0x02])  # S = 2, Lmax = 2, k = 3, lengths 1, 2, 2
HALF = pack_bits("0" * 20 + "10" * 8 + "11" * 4)  # 32 symbols: 20 x 30, 8 x 38, 4 x 40 (44 bits)


def _set(blob: bytearray, at: int, value: int) -> bytes:
    blob[at] = value
    return bytes(blob)


REFUSALS = [  # (id, what the reader's error names, the stored chunk of N float8_e4m3fn symbols)
    ("mode-3", "mode byte", lambda: _set(bytearray(fp8(huffman())), 0, 3)),
    ("pad", "pad", lambda: _set(bytearray(fp8(huffman())), 2, 1)),
    ("lengths-short-of-chunk", "plane lengths", lambda: fp8(huffman()) + b"\0"),
    ("raw-not-plane-len", "raw plane length", lambda: stored_chunk([0], [PLANE[:-1]])),
    ("coded-not-shorter", "coded plane length", lambda: fp8(huffman() + bytes(N))),
    ("zstd-garbage", "D4 (zstd)", lambda: fp8(b"\x28\xb5\x2f\xfd" + bytes(8), mode=1)),
    ("zstd-declares-65", "D4 (declared size)", lambda: fp8(zstandard.ZstdCompressor().compress(PLANE + b"\0"), 1)),
    ("header-past-plane", "Huffman header past", lambda: fp8(b"\x02\x02")),
    ("S=0", "stream count", lambda: fp8(_set(huffman(), 0, 0))),
    ("S=9", "stream count", lambda: fp8(_set(huffman(), 0, 9))),
    ("Lmax=0", "Lmax", lambda: fp8(_set(huffman(), 1, 0))),
    ("Lmax=13", "Lmax", lambda: fp8(_set(huffman(), 1, 13))),
    ("k=1", "fewer than two symbols", lambda: fp8(bytes([1, 1, 0, 0x30, 0x01]) + pack_bits("0" * N))),
    ("table-past-plane", "table past the plane", lambda: fp8(bytes([2, 2, 200]) + bytes(30))),
    ("symbols-repeat", "symbols not ascending", lambda: fp8(_set(huffman(), 4, 0x30))),
    ("length-0", "code length out of 1..Lmax", lambda: fp8(_set(huffman(), 6, 0x20))),
    ("length-over-Lmax", "code length out of 1..Lmax", lambda: fp8(_set(huffman(), 6, 0x23))),
    ("pad-nibble", "pad nibble", lambda: fp8(_set(huffman(), 7, 0x12))),
    ("over-subscribed", "Kraft sum", lambda: fp8(_set(huffman(), 6, 0x11))),  # lengths 1, 1, 2
    ("under-full", "Kraft sum", lambda: fp8(with_streams(bytes([1, 2, 1, 0x30, 0x38, 0x22]), pack_bits("00" * N)))),
    ("no-length-Lmax", "no code of length Lmax",
     lambda: fp8(with_streams(bytes([1, 2, 1, 0x30, 0x38, 0x11]), pack_bits("0" * N)))),
    ("stream-lengths-overrun", "stream lengths overrun", lambda: fp8(TABLE + struct.pack("<I", 40) + HALF + HALF)),
    ("ends-early", "ends early", lambda: fp8(with_streams(TABLE, HALF, HALF[:-1]))),
    ("ends-late-byte", "ends late: a whole byte", lambda: fp8(with_streams(TABLE, HALF + b"\0", HALF))),
    ("ends-late-pad-bit", "ends late: pad bits",
     lambda: fp8(with_streams(TABLE, HALF, HALF[:-1] + bytes([HALF[-1] | 0x80])))),
]


def test_the_refusal_chunks_differ_from_a_good_one_only_where_they_say():
    assert decode_float_planes(fp8(huffman()), 16, N) == PLANE
    assert decode_float_planes(fp8(with_streams(TABLE, HALF, HALF)), 16, N) == bytes([0x30] * 20 + [0x38] * 8
                                                                                     + [0x40] * 4) * 2


@pytest.mark.parametrize("rule, build", [pytest.param(rule, build, id=i) for i, rule, build in REFUSALS])
def test_d4_refusals(tmp_path, rule, build):
    chunk = build()
    with pytest.raises(SpecError, match=re.escape(rule)):
        decode_float_planes(chunk, 16, N)
    path = tmp_path / "bad.lzy"
    build_file(path, 16, (N,), N, [chunk])
    with pytest.raises(SpecError, match="D4"), SpecFile(path) as f:
        f.tensor("t")
    if LAZYSTORE_HAS_CODEC_4:
        with pytest.raises(ls.FormatError) as exc:
            ls.load(path)
        assert not isinstance(exc.value, ls.UnsupportedVersionError)


def test_d4_refuses_a_stream_with_no_symbol(tmp_path):
    # 42 symbols in S = 8 streams: q = 6, and streams 0-6 take all 42, so the last codes none: (S - 1) * q >= n.
    table = bytes([8, 1, 1, 0x30, 0x38, 0x11])  # two symbols of length 1
    chunk = fp8(with_streams(table, *[b"\0"] * 7, b""))
    assert len(chunk) - 8 < 42  # shorter than the plane: the stream rule is what refuses it
    with pytest.raises(SpecError, match="an empty stream"):
        decode_float_planes(chunk, 16, 42)
    path = tmp_path / "bad.lzy"
    build_file(path, 16, (42,), 42, [chunk])
    if LAZYSTORE_HAS_CODEC_4:
        with pytest.raises(ls.FormatError) as exc:
            ls.load(path)
        assert not isinstance(exc.value, ls.UnsupportedVersionError)
