"""Codec 4's C kernels (lazystore/codecs/_float_planes.c, _huffman.c):
float_split against the layout formulas of docs/design/29-exponent-coder.md
§2, huffman_encode's bytes against a bit-by-bit reading of §3 written here,
float_decode's round trips (random, exponent-like and MiniLM's trained
weights), every refusal, a mutated stream included, and agreement with the
numpy reference (lazystore/codecs/huffman_ref.py) both ways."""

from __future__ import annotations

import heapq
from concurrent.futures import ThreadPoolExecutor

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazystore.codecs import compiled, huffman_code, huffman_ref
from lazystore.errors import FormatError

kernels = compiled.kernels
pytestmark = pytest.mark.skipif(kernels is None, reason="the C kernels are not built here")

PLAIN, BF16, FP32 = 0, 1, 2
# (layout, planes, element dtype, the plane the writer codes with Huffman)
LAYOUTS = {
    "fp8": (PLAIN, 1, ml_dtypes.float8_e4m3fn, 0),
    "fp16": (PLAIN, 2, np.float16, 1),
    "bf16": (BF16, 2, ml_dtypes.bfloat16, 1),
    "fp32": (FP32, 4, np.float32, 3),
}


def split_reference(chunk: np.ndarray, layout: int, planes: int) -> np.ndarray:
    """The planes (P x m) by the design's formulas, in numpy."""
    if layout == PLAIN:
        return chunk.reshape(-1, planes).T.copy()
    if layout == BF16:
        x = chunk.view("<u2").astype(np.uint32)
        return np.stack([(x & 0x7F) | ((x >> 8) & 0x80), (x >> 7) & 0xFF]).astype(np.uint8)
    x = chunk.view("<u4")
    return np.stack([x & 0xFF, (x >> 8) & 0xFF, ((x >> 16) & 0x7F) | ((x >> 24) & 0x80), (x >> 23) & 0xFF]).astype(
        np.uint8)


def code_lengths(plane: np.ndarray, limit: int = 11) -> np.ndarray:
    """Huffman code lengths of the plane's symbols (256, 0 = absent), kept
    under ``limit`` by halving the counts until they fit."""
    counts = np.bincount(plane, minlength=256).astype(np.int64)
    while True:
        heap = [(int(counts[s]), s, (s,)) for s in range(256) if counts[s]]
        heapq.heapify(heap)
        lengths = np.zeros(256, dtype=np.uint8)
        while len(heap) > 1:
            a, b = heapq.heappop(heap), heapq.heappop(heap)
            lengths[list(a[2] + b[2])] += 1
            heapq.heappush(heap, (a[0] + b[0], min(a[1], b[1]), a[2] + b[2]))
        if lengths.max() <= limit:
            return lengths
        counts = np.where(counts > 0, (counts >> 1) | 1, 0)


def streams_of(blob: bytes, nstreams: int) -> tuple[bytes, ...]:
    """huffman_encode's bytes: (S-1) u32 lengths, then the streams."""
    lengths = np.frombuffer(blob[: 4 * (nstreams - 1)], "<u4").tolist()
    at, streams = 4 * (nstreams - 1), []
    for length in [*lengths, len(blob) - 4 * (nstreams - 1) - sum(lengths)]:
        streams.append(blob[at : at + length])
        at += length
    return tuple(streams)


def fitting_streams(n: int, wanted: int) -> int:
    """The most streams, up to ``wanted``, that leave none of n symbols empty."""
    return max(s for s in range(1, wanted + 1) if (s - 1) * -(-n // s) < n)


def huffman_plane(plane: np.ndarray, nstreams: int = 4, limit: int = 11) -> tuple:
    """The plane as float_decode takes it: (symbols, lengths, lmax, streams);
    fewer streams than asked where a plane is too short for them."""
    nstreams = fitting_streams(plane.size, nstreams)
    lengths = code_lengths(plane, limit)
    present = np.flatnonzero(lengths)
    blob = kernels.huffman_encode(plane, lengths.tobytes(), nstreams)
    return bytes(present.astype(np.uint8)), bytes(lengths[present]), int(lengths.max()), streams_of(blob, nstreams)


def exponent_like(dtype, n: int, seed: int) -> np.ndarray:
    """Trained-weight-like floats: normal, a spread of scales, a few specials."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n) * np.exp(rng.normal(-3, 1, n))
    values[: min(n, 4)] = [0.0, -0.0, np.inf, np.nan][: min(n, 4)]
    return values.astype(np.float32).astype(dtype)


def random_bits(dtype, n: int, seed: int) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    return np.random.default_rng(seed).integers(0, 256, n * itemsize, dtype=np.uint8).view(dtype)


def encode_chunk(values: np.ndarray, name: str, huffman: tuple[int, ...] | None = None, nstreams=4) -> list:
    layout, p, _, exponent = LAYOUTS[name]
    chunk = values.view(np.uint8).reshape(-1)
    planes = np.empty(chunk.size, dtype=np.uint8)
    kernels.float_split(chunk, layout, p, planes)
    planes = planes.reshape(p, -1)
    items: list = [planes[j].tobytes() for j in range(p)]
    for j in (exponent,) if huffman is None else huffman:
        if len(np.unique(planes[j])) >= 2:
            items[j] = huffman_plane(planes[j], nstreams)
    return items


def decode_chunk(items: list, name: str, m: int) -> np.ndarray:
    """float_decode into the middle of a bigger buffer, whose edges must stay as they were."""
    layout, p, _, _ = LAYOUTS[name]
    buffer = np.full(m * p + 16, 0xA5, dtype=np.uint8)
    kernels.float_decode(buffer[8:-8], layout, items)
    assert (buffer[:8] == 0xA5).all() and (buffer[-8:] == 0xA5).all()
    return buffer[8:-8]


# ---- float_split ----

@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("m", [0, 1, 31, 1000])
def test_float_split_matches_the_layout_formulas(name, m):
    layout, p, dtype, _ = LAYOUTS[name]
    chunk = random_bits(dtype, m, m).view(np.uint8)
    out = np.full(m * p, 0x5A, dtype=np.uint8)
    kernels.float_split(chunk, layout, p, out)
    np.testing.assert_array_equal(out.reshape(p, m), split_reference(chunk, layout, p))


@pytest.mark.parametrize("p", [3, 4, 8])
def test_float_split_plain_takes_any_byte_count(p):
    chunk = np.random.default_rng(p).integers(0, 256, 99 * p, dtype=np.uint8)
    out = np.empty_like(chunk)
    kernels.float_split(chunk, PLAIN, p, out)
    np.testing.assert_array_equal(out.reshape(p, 99), split_reference(chunk, PLAIN, p))


def test_float_split_refusals():
    chunk = np.zeros(8, dtype=np.uint8)
    with pytest.raises(ValueError, match="no float layout 3"):
        kernels.float_split(chunk, 3, 2, np.empty(8, dtype=np.uint8))
    with pytest.raises(ValueError, match="has no 4 planes"):
        kernels.float_split(chunk, BF16, 4, np.empty(8, dtype=np.uint8))
    with pytest.raises(ValueError, match="cannot split 8 bytes"):
        kernels.float_split(chunk, FP32, 4, np.empty(9, dtype=np.uint8))
    with pytest.raises(ValueError, match="cannot split 6 bytes"):
        kernels.float_split(chunk[:6], FP32, 4, np.empty(6, dtype=np.uint8))
    memory = np.zeros(16, dtype=np.uint8)
    with pytest.raises(ValueError, match="overlaps the chunk"):
        kernels.float_split(memory[:8], BF16, 2, memory[4:12])


# ---- huffman_encode's bytes, read bit by bit from the spec ----

def read_bit_by_bit(symbols: bytes, lengths: bytes, stream: bytes, count: int) -> list[int]:
    """§3 alone: canonical codes by (length, symbol), LSB-first bits, each code MSB-first, zero pad."""
    order = sorted(range(len(symbols)), key=lambda i: (lengths[i], symbols[i]))
    codes, code, previous = {}, 0, lengths[order[0]]
    for rank, i in enumerate(order):
        if rank:
            code = (code + 1) << (lengths[i] - previous)
        previous = lengths[i]
        codes[(lengths[i], code)] = symbols[i]
    bits = [(stream[i // 8] >> (i % 8)) & 1 for i in range(8 * len(stream))]
    out, at = [], 0
    while len(out) < count:
        value, length = 0, 0
        while (length, value) not in codes:
            assert at < len(bits), "the stream ends early"
            value, length, at = (value << 1) | bits[at], length + 1, at + 1
        out.append(codes[(length, value)])
    assert len(bits) - at < 8 and not any(bits[at:]), "the stream ends late"
    return out


@pytest.mark.parametrize("nstreams", [1, 3, 4, 8])
@pytest.mark.parametrize("n", [8, 29, 1001])
def test_encoded_bytes_read_bit_by_bit(nstreams, n):
    plane = np.clip(np.random.default_rng(n).normal(120, 4, n), 90, 150).astype(np.uint8)
    symbols, lengths, _, streams = huffman_plane(plane, nstreams)
    assert len(streams) == nstreams
    q = -(-n // nstreams)
    decoded = [s for i, stream in enumerate(streams) for s in
               read_bit_by_bit(symbols, lengths, stream, min(q, n - i * q))]
    assert decoded == plane.tolist()


def test_a_twelve_bit_code_reads_bit_by_bit():
    # Fibonacci-like counts give the deepest codes the format allows (Lmax 12).
    counts = [1, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144]
    plane = np.repeat(np.arange(13, dtype=np.uint8) * 7, counts)
    np.random.default_rng(0).shuffle(plane)
    symbols, lengths, lmax, streams = huffman_plane(plane, 2, limit=12)
    assert lmax == 12
    q = -(-plane.size // 2)
    assert read_bit_by_bit(symbols, lengths, streams[0], q) + read_bit_by_bit(
        symbols, lengths, streams[1], plane.size - q) == plane.tolist()
    out = np.empty_like(plane)
    kernels.float_decode(out, PLAIN, [(symbols, lengths, lmax, streams)])
    np.testing.assert_array_equal(out, plane)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1001])
def test_every_symbol_at_twelve_bits(n):
    # The encoder's buffer is sized for the longest codes everywhere: a plane
    # of only the two 12-bit symbols of a Fibonacci-like code fills it.
    counts = [1, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144]
    lengths = code_lengths(np.repeat(np.arange(13, dtype=np.uint8), counts), limit=12)
    assert lengths[0] == lengths[1] == 12
    plane = np.random.default_rng(n).integers(0, 2, n).astype(np.uint8)
    blob = kernels.huffman_encode(plane, lengths.tobytes(), 1)
    assert len(blob) == -(-12 * n // 8)
    present = np.flatnonzero(lengths)
    out = np.empty(n, dtype=np.uint8)
    kernels.float_decode(out, PLAIN, [(bytes(present.astype(np.uint8)), bytes(lengths[present]), 12, (blob,))])
    np.testing.assert_array_equal(out, plane)


# ---- float_decode round trips ----

@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("values", [exponent_like, random_bits])
@pytest.mark.parametrize("m", [2, 5, 17, 4095, 4096, 4097, 70_001])
def test_round_trip(name, values, m):
    dtype = LAYOUTS[name][2]
    chunk = values(dtype, m, m)
    items = encode_chunk(chunk, name)
    np.testing.assert_array_equal(decode_chunk(items, name, m), chunk.view(np.uint8).reshape(-1))


@pytest.mark.parametrize("nstreams", [1, 2, 5, 8])
def test_round_trip_with_every_plane_huffman(nstreams):
    chunk = exponent_like(np.float32, 9_999, nstreams)
    items = encode_chunk(chunk, "fp32", huffman=(0, 1, 2, 3), nstreams=nstreams)
    np.testing.assert_array_equal(decode_chunk(items, "fp32", chunk.size), chunk.view(np.uint8))


def test_round_trip_with_planes_of_different_stream_counts():
    # The format lets each Huffman plane have its own S (the writer never does).
    chunk = exponent_like(ml_dtypes.bfloat16, 5_000, 3)
    items = encode_chunk(chunk, "bf16", huffman=(1,), nstreams=4)
    items[0] = encode_chunk(chunk, "bf16", huffman=(0,), nstreams=3)[0]
    np.testing.assert_array_equal(decode_chunk(items, "bf16", chunk.size), chunk.view(np.uint8))


@pytest.mark.parametrize("nstreams", [2, 4, 8])
def test_round_trip_with_streams_decoding_at_unequal_speeds(nstreams):
    # A stream runs ahead of its block into the next (the kernel keeps what
    # it decoded past a block for the next one): here the first stream's
    # symbols take 1 bit and the others' up to 11, so it gets far ahead
    # each block, and the streams end at different points of a block.
    m = 3 * 4096 + 77
    chunk = random_bits(ml_dtypes.bfloat16, m, nstreams).view("<u2").copy()
    chunk[: m // nstreams] = (chunk[: m // nstreams] & 0x807F) | (127 << 7)  # exponent 127 throughout
    chunk = chunk.view(ml_dtypes.bfloat16)
    items = encode_chunk(chunk, "bf16", nstreams=nstreams)
    assert isinstance(items[1], tuple) and len(items[1][3]) == nstreams
    np.testing.assert_array_equal(decode_chunk(items, "bf16", m), chunk.view(np.uint8))
    two = encode_chunk(chunk, "bf16", huffman=(0, 1), nstreams=nstreams)  # both planes Huffman, in step
    np.testing.assert_array_equal(decode_chunk(two, "bf16", m), chunk.view(np.uint8))


@pytest.mark.parametrize("name", ["bf16", "fp32"])
def test_round_trip_of_trained_weights(minilm, name):
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    weights = safetensors_numpy.load_file(str(minilm))["encoder.layer.0.intermediate.dense.weight"].reshape(-1)
    chunk = weights.astype(LAYOUTS[name][2])
    items = encode_chunk(chunk, name)
    exponent = items[LAYOUTS[name][3]]
    assert sum(len(s) for s in exponent[3]) < 0.45 * chunk.size  # trained exponents: under 3.6 bits
    np.testing.assert_array_equal(decode_chunk(items, name, chunk.size), chunk.view(np.uint8))


def test_threads_decode_at_once():
    chunks = [exponent_like(ml_dtypes.bfloat16, 50_000, seed) for seed in range(8)]
    encoded = [encode_chunk(chunk, "bf16") for chunk in chunks]
    with ThreadPoolExecutor(4) as pool:
        for chunk, out in zip(chunks, pool.map(lambda items: decode_chunk(items, "bf16", 50_000), encoded)):
            np.testing.assert_array_equal(out, chunk.view(np.uint8))


# ---- refusals ----

def fp8_plane(n=4000, seed=1, nstreams=4):
    plane = np.clip(np.random.default_rng(seed).normal(100, 5, n), 60, 140).astype(np.uint8)
    return plane, huffman_plane(plane, nstreams)


def refused(items, match, layout=PLAIN, m=4000):
    with pytest.raises(ValueError, match=match):
        kernels.float_decode(np.empty(m * len(items), dtype=np.uint8), layout, items)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s, lens, x: (s[:1], lens[:1], x), "2 to 256 symbols"),
        (lambda s, lens, x: (s[1:2] + s[:1] + s[2:], lens, x), "not strictly ascending"),
        (lambda s, lens, x: (s[:1] + s[:1] + s[2:], lens, x), "not strictly ascending"),
        (lambda s, lens, x: (s, b"\x00" + lens[1:], x), "outside 1..Lmax"),
        (lambda s, lens, x: (s, bytes([x + 1]) + lens[1:], x), "outside 1..Lmax"),
        (lambda s, lens, x: (s, lens, 13), "Lmax outside 1..12"),
        (lambda s, lens, x: (s, lens, 0), "Lmax outside 1..12"),
        (lambda s, lens, x: (s, lens, x + 1), "no code is Lmax bits long"),
        (lambda s, lens, x: (s, bytes([max(1, lens[0] - 1)]) + lens[1:], x), "Kraft"),  # over-subscribed
        (lambda s, lens, x: (s, lens[:-1], x), "symbols but"),
    ],
)
def test_refuses_a_bad_code(change, match):
    _, (symbols, lengths, lmax, streams) = fp8_plane()
    symbols, lengths, lmax = change(symbols, lengths, lmax)
    refused([(symbols, lengths, lmax, streams)], match)


def test_refuses_a_code_with_no_length_lmax():
    # 1, 2, 2 is complete (Kraft's equality does not depend on Lmax), but
    # declared with Lmax 3 no code is that long.
    refused([(b"\x00\x01\x02", b"\x01\x02\x02", 3, (b"\x00",))], "no code is Lmax bits long", m=1)


def test_refuses_streams_that_end_early_or_late():
    plane, (symbols, lengths, lmax, streams) = fp8_plane()
    last = streams[-1]
    refused([(symbols, lengths, lmax, streams[:-1] + (last[:-1],))], "stream 3 ends early")
    refused([(symbols, lengths, lmax, streams[:1] + (streams[1][:-1],) + streams[2:])], "stream 1 ends early")
    refused([(symbols, lengths, lmax, streams[:-1] + (last + b"\x00",))], "stream 3 ends late")
    refused([(symbols, lengths, lmax, streams[:-1] + (b"",))], "stream 3 ends early")


def test_refuses_non_zero_pad_bits():
    plane, (symbols, lengths, lmax, streams) = fp8_plane()
    code = dict(zip(symbols, lengths))
    q = -(-plane.size // 4)
    for s, stream in enumerate(streams):
        pad = -sum(code[v] for v in plane[s * q : (s + 1) * q].tolist()) % 8
        if pad:
            bad = stream[:-1] + bytes([stream[-1] | 0x80])
            refused([(symbols, lengths, lmax, streams[:s] + (bad,) + streams[s + 1 :])], "non-zero pad bits")
            return
    pytest.fail("no stream with pad bits to set")


def test_refuses_stream_counts_that_do_not_fit():
    _, (symbols, lengths, lmax, streams) = fp8_plane()
    refused([(symbols, lengths, lmax, ())], "0 streams")
    refused([(symbols, lengths, lmax, streams * 3)], "12 streams")
    # 4 streams of 5 symbols: q = 2 leaves the last stream nothing.
    refused([(symbols, lengths, lmax, streams)], "leaves a stream without symbols", m=5)
    refused([(symbols, lengths, lmax, streams)], "leaves a stream without symbols", m=0)
    # Three streams where four were coded: their symbol counts do not match their bits.
    refused([(symbols, lengths, lmax, streams[:3])], "ends (early|late)")


def test_refuses_bad_shapes():
    plane, huff = fp8_plane()
    with pytest.raises(ValueError, match="no float layout 7"):
        kernels.float_decode(np.empty(8000, dtype=np.uint8), 7, [plane, huff])
    with pytest.raises(ValueError, match="has no 1 planes"):
        kernels.float_decode(np.empty(4000, dtype=np.uint8), BF16, [huff])
    with pytest.raises(ValueError, match="not whole elements"):
        kernels.float_decode(np.empty(8001, dtype=np.uint8), BF16, [plane, huff])
    with pytest.raises(ValueError, match="plane 0 is 3999 bytes"):
        kernels.float_decode(np.empty(8000, dtype=np.uint8), BF16, [plane[1:], huff])
    with pytest.raises(TypeError):
        kernels.float_decode(np.empty(4000, dtype=np.uint8), PLAIN, [(b"\x00\x01", b"\x01\x01")])
    with pytest.raises(TypeError):
        kernels.float_decode(np.empty(4000, dtype=np.uint8), PLAIN, [7])
    with pytest.raises(BufferError):
        kernels.float_decode(b"\x00" * 4000, PLAIN, [huff])


def test_refuses_an_output_over_an_input():
    plane, (symbols, lengths, lmax, streams) = fp8_plane()
    first = len(streams[0])
    memory = np.zeros(8000 + first, dtype=np.uint8)
    memory[:first] = np.frombuffer(streams[0], np.uint8)
    before = memory.copy()
    # The output's first byte is the stream's last.
    with pytest.raises(ValueError, match="overlaps an input"):
        kernels.float_decode(memory[first - 1 : first - 1 + 4000], PLAIN,
                             [(symbols, lengths, lmax, (memory[:first],) + streams[1:])])
    # A raw plane inside the output.
    with pytest.raises(ValueError, match="overlaps an input"):
        kernels.float_decode(memory[:8000], BF16, [memory[2000:6000], (symbols, lengths, lmax, streams)])
    np.testing.assert_array_equal(memory, before)  # refused before writing anything


@pytest.mark.parametrize(
    ("lengths", "nstreams", "match"),
    [
        (np.r_[[1, 1], np.zeros(254)], 9, "1 to 8 streams"),
        (np.r_[[1, 1], np.zeros(254)], 0, "1 to 8 streams"),
        (np.r_[[1, 1], np.zeros(255)], 1, "256 bytes, not 257"),
        (np.r_[[13, 1], np.full(254, 0)], 1, "above 12"),
        (np.r_[[1], np.zeros(255)], 1, "at least 2 symbols"),
        (np.r_[[1, 2], np.zeros(254)], 1, "Kraft"),
        (np.r_[[1, 1, 1], np.zeros(253)], 1, "Kraft"),
        (np.r_[[1, 0, 1], np.zeros(253)], 1, "symbol 1 is in the plane"),
    ],
)
def test_huffman_encode_refusals(lengths, nstreams, match):
    with pytest.raises(ValueError, match=match):
        kernels.huffman_encode(np.array([0, 1, 2, 0, 1] * 3, np.uint8), lengths.astype(np.uint8).tobytes(), nstreams)


def test_huffman_encode_refuses_a_stream_without_symbols():
    with pytest.raises(ValueError, match="leave a stream without symbols"):
        kernels.huffman_encode(np.array([0, 1, 0, 1, 1], np.uint8), bytes([1, 1]) + bytes(254), 4)


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 4097])
def test_byte_counts_match_bincount(n):
    rng = np.random.default_rng(n)
    plane = np.concatenate([rng.integers(0, 256, n // 2), np.full(n - n // 2, 127)]).astype(np.uint8)
    counts = np.full(256, 99, dtype=np.uint64)
    kernels.byte_counts(plane, counts)
    np.testing.assert_array_equal(counts, np.bincount(plane, minlength=256))


def test_byte_counts_refusals():
    with pytest.raises(ValueError, match="256 u64"):
        kernels.byte_counts(bytes(10), np.zeros(255, np.uint64))
    both = np.zeros(300, np.uint64)
    with pytest.raises(ValueError, match="overlap"):
        kernels.byte_counts(both.view(np.uint8)[:100], both[:256])


# ---- mutated streams: a refusal or a result, never a crash ----

FUZZ_PLANE = np.clip(np.random.default_rng(9).normal(120, 6, 3000), 0, 255).astype(np.uint8)
FUZZ_HUFF = huffman_plane(FUZZ_PLANE, 4)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_planes_are_refused_or_decoded(data):
    symbols, lengths, lmax, streams = FUZZ_HUFF
    streams = list(streams)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "grow", "lmax", "length", "symbol", "drop"]))
        s = data.draw(st.integers(0, len(streams) - 1)) if streams else 0
        if kind == "flip" and streams and streams[s]:
            stream = bytearray(streams[s])
            bit = data.draw(st.integers(0, 8 * len(stream) - 1))
            stream[bit // 8] ^= 1 << (bit % 8)
            streams[s] = bytes(stream)
        elif kind == "cut" and streams:
            streams[s] = streams[s][: data.draw(st.integers(0, len(streams[s])))]
        elif kind == "grow" and streams:
            streams[s] = streams[s] + data.draw(st.binary(min_size=1, max_size=9))
        elif kind == "lmax":
            lmax = data.draw(st.integers(0, 14))
        elif kind == "length":
            i = data.draw(st.integers(0, len(lengths) - 1))
            lengths = lengths[:i] + bytes([data.draw(st.integers(0, 15))]) + lengths[i + 1 :]
        elif kind == "symbol":
            i = data.draw(st.integers(0, len(symbols) - 1))
            symbols = symbols[:i] + bytes([data.draw(st.integers(0, 255))]) + symbols[i + 1 :]
        elif kind == "drop" and streams:
            streams.pop(s)
    rest = np.arange(3000, dtype=np.uint8)
    layout, items = data.draw(st.sampled_from([(PLAIN, 1), (BF16, 2)]))
    huffman = (symbols, lengths, lmax, tuple(streams))
    planes = [huffman] if items == 1 else [rest, huffman]
    out = np.empty(3000 * items, dtype=np.uint8)
    try:
        kernels.float_decode(out, layout, planes)
    except ValueError:
        return


# ---- the kernels against the numpy reference (lazystore/codecs/huffman_ref.py) ----

def exponent_plane(values, n: int, seed: int) -> np.ndarray:
    chunk = values(ml_dtypes.bfloat16, n, seed).view(np.uint8)
    return split_reference(chunk, BF16, 2)[1].copy()


@pytest.mark.parametrize("values", [exponent_like, random_bits])
@pytest.mark.parametrize("n", [3, 1000, 70_001])
@pytest.mark.parametrize("wanted", [1, 4, 8])
def test_the_kernels_and_the_numpy_reference_agree_both_ways(values, n, wanted):
    plane = exponent_plane(values, n, n + wanted)
    plane[0] = plane[1] ^ 1  # two symbols at least
    lengths = huffman_code.code_lengths(np.bincount(plane, minlength=256))
    nstreams = huffman_code.stream_count(n, wanted)
    ours = kernels.huffman_encode(plane, lengths.tobytes(), nstreams)
    assert ours == huffman_ref.encode_streams(plane, lengths, nstreams)
    parsed = huffman_code.parse_plane(memoryview(huffman_code.plane_header(lengths, nstreams) + ours), n)
    np.testing.assert_array_equal(huffman_ref.decode_streams(parsed, n), plane)
    out = np.empty(n, dtype=np.uint8)
    kernels.float_decode(out, PLAIN, [parsed])  # a HuffmanPlane, as the codec passes it
    np.testing.assert_array_equal(out, plane)


REF_PLANE = exponent_plane(exponent_like, 2000, 5)
REF_LENGTHS = huffman_code.code_lengths(np.bincount(REF_PLANE, minlength=256))
REF_BLOB = huffman_code.plane_header(REF_LENGTHS, 4) + kernels.huffman_encode(REF_PLANE, REF_LENGTHS.tobytes(), 4) \
    if kernels is not None else b""


@settings(max_examples=200, deadline=None)
@given(flips=st.lists(st.integers(0, max(0, 8 * len(REF_BLOB) - 1)), min_size=1, max_size=3), cut=st.integers(0, 3))
def test_the_kernels_and_the_numpy_reference_refuse_alike(flips, cut):
    # Flipped bits anywhere in the plane (header, table, stream lengths,
    # streams) and a cut end: the same symbols from both, or both refuse.
    blob = bytearray(REF_BLOB)
    for bit in flips:
        blob[bit // 8] ^= 1 << (bit % 8)
    blob = bytes(blob[: len(blob) - cut])
    try:
        parsed = huffman_code.parse_plane(memoryview(blob), REF_PLANE.size)
    except FormatError:
        return
    try:
        theirs = huffman_ref.decode_streams(parsed, REF_PLANE.size)
    except FormatError:
        theirs = None
    ours = np.empty(REF_PLANE.size, dtype=np.uint8)
    try:
        kernels.float_decode(ours, PLAIN, [parsed])
    except ValueError:
        ours = None
    assert (ours is None) == (theirs is None)
    if ours is not None:
        np.testing.assert_array_equal(ours, theirs)


@settings(max_examples=300, deadline=None)
@given(flips=st.lists(st.integers(0, max(0, 8 * len(REF_BLOB) - 1)), min_size=1, max_size=3), cut=st.integers(0, 3),
       n=st.sampled_from([REF_PLANE.size, REF_PLANE.size - 1, REF_PLANE.size + 1, 4, 3]))
def test_the_kernels_parse_a_stored_plane_as_parse_plane_does(flips, cut, n):
    # Flipped bits, mostly in the header and table, a cut end, an unexpected
    # symbol count: float_decode given the stored plane (modes b"\x02", as
    # codec 4 calls it) refuses exactly what parse_plane and the decode of its
    # result refuse, and otherwise gives the same symbols.
    blob = bytearray(REF_BLOB)
    for bit in flips:
        bit %= 8 * (3 + 2 * 256) if bit % 2 else 8 * len(blob)  # half of them in the first bytes
        blob[bit // 8] ^= 1 << (bit % 8)
    blob = bytes(blob[: len(blob) - cut])
    theirs = np.empty(n, dtype=np.uint8)
    try:
        kernels.float_decode(theirs, PLAIN, [huffman_code.parse_plane(memoryview(blob), n)])
    except (FormatError, ValueError):
        theirs = None
    ours = np.empty(n, dtype=np.uint8)
    try:
        kernels.float_decode(ours, PLAIN, [blob], b"\x02")
    except ValueError:
        ours = None
    assert (ours is None) == (theirs is None)
    if ours is not None:
        np.testing.assert_array_equal(ours, theirs)


def test_stored_planes_need_one_mode_a_plane():
    with pytest.raises(ValueError, match="1 plane modes for 2 planes"):
        kernels.float_decode(np.empty(8, np.uint8), PLAIN, [bytes(4), bytes(4)], b"\x00")
