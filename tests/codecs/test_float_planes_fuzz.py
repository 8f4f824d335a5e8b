"""Fuzzing codec 4's decoder: damaged chunks are refused or decoded, alike
by the C kernels and the numpy reference.

Seeds are codec-4 chunks of every plane layout (bf16, fp32, fp16, fp8),
encoded by the writer from the 1.5 golden file's tensors (slices of the
real MiniLM weights, see tests/data/make_goldens_v1_5.py) and from random
numbers, plus chunks whose exponent plane has 1, 2 or 8 streams or 12-bit
codes (the writer makes 4 and at most 11, a reader must take them all).
Hypothesis mutates them: bit flips, byte overwrites, truncation,
extension, and rewritten fields (a plane's mode byte or length; a Huffman
plane's S, Lmax, k-1, symbol and length-nibble bytes, stream lengths and
each stream's last byte, set, nudged or bit-flipped), and sometimes claims
one element more or fewer than the chunk holds. Each mutant is decoded by
``FloatPlanes().decode_into`` with the C kernels and with
``compiled.kernels = None``: each must raise FormatError or fill the
output, and the two must agree (both refuse, or both give the same bytes).
Neither may crash or hang: the chunks are a few hundred elements (two of
9,000, whose streams span several of the C decoder's blocks), so the numpy
path stays fast.

The quick tier runs ``examples(60)`` mutants over all the seeds; the slow
one ``LAZYSTORE_FUZZ_EXAMPLES`` (default ``examples(500)``) per seed. A
mutant that breaks a rule is kept under
tests/data/fuzz_regressions/float_planes/ as
``<dtype>-<elements>-<what>.chunk`` (its stored bytes) and replayed by
:func:`test_float_planes_regressions` on every run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lazystore.codecs import compiled, huffman_code, huffman_ref
from lazystore.codecs.float_layout import layout_of, split
from lazystore.codecs.float_planes import MODE_HUFFMAN, FloatPlanes, mode_bytes
from lazystore.errors import FormatError
from tests.hypothesis_profiles import examples
from tests.paths import DATA
from tests.properties.test_golden_huffman import chunk_layout, goldens
from tests.properties.test_spec_reader import SpecError, huffman_plane

REGRESSIONS = DATA / "fuzz_regressions" / "float_planes"
SEED_ELEMENTS = 300  # per seed chunk: short enough for the numpy decoder, long enough for 4 streams
LONG_ELEMENTS = 9000  # a few seeds: streams of several kernel blocks, still ~2 ms for numpy
KERNELS = compiled.kernels  # as imported; a test may swap compiled.kernels out


class Field(NamedTuple):
    """A field of a seed chunk the mutations may rewrite: its offset and width in bytes."""

    at: int
    width: int


class Seed(NamedTuple):
    dtype: np.dtype
    elements: int
    chunk: bytes
    fields: tuple[Field, ...]


def fields_of(chunk: bytes, planes: int) -> tuple[Field, ...]:
    """Where a valid chunk's header fields are: each mode byte and plane
    length, and in each Huffman plane S, Lmax, k-1, every symbol and
    length-nibble byte, every stream length and every stream's last byte
    (docs/format.md §9.5)."""
    h0 = mode_bytes(planes)
    lengths = struct.unpack_from(f"<{planes}I", chunk, h0)
    fields = [Field(j, 1) for j in range(planes)] + [Field(h0 + 4 * j, 4) for j in range(planes)]
    at = h0 + 4 * planes
    for mode, length in zip(chunk[:planes], lengths):
        if mode == MODE_HUFFMAN:
            s, k = chunk[at], chunk[at + 2] + 1
            table = 3 + k + (k + 1) // 2
            fields += [Field(at + i, 1) for i in range(table)]
            fields += [Field(at + table + 4 * i, 4) for i in range(s - 1)]
            slens = struct.unpack_from(f"<{s - 1}I", chunk, at + table)
            ends = np.cumsum([at + table + 4 * (s - 1), *slens, length - table - 4 * (s - 1) - sum(slens)])
            fields += [Field(int(end) - 1, 1) for end in ends[1:]]  # each stream's last byte: its pad bits
        at += length
    return tuple(fields)


def seed(values: np.ndarray) -> Seed:
    dtype = values.dtype
    planes = layout_of(dtype).planes
    chunk = bytes(FloatPlanes().encode(np.frombuffer(values.tobytes(), np.uint8), planes, True, dtype=dtype))
    return Seed(dtype, len(values), chunk, fields_of(chunk, planes))


def built(values: np.ndarray, streams: int, limit: int) -> Seed:
    """A chunk as the writer would store it but for the exponent plane,
    Huffman-coded with ``streams`` streams and codes up to ``limit`` bits
    (the writer uses 4 and 11; the format allows 1-8 and 12): the other
    planes raw."""
    layout = layout_of(values.dtype)
    planes = split(np.frombuffer(values.tobytes(), np.uint8), layout.layout, layout.planes)
    coded = [huffman_code.encode_plane(p, limit, streams) if j == layout.exponent_plane else p.tobytes()
             for j, p in enumerate(planes)]
    modes = bytearray(mode_bytes(layout.planes))
    modes[layout.exponent_plane] = MODE_HUFFMAN
    chunk = bytes(modes) + np.array([len(c) for c in coded], "<u4").tobytes() + b"".join(coded)
    return Seed(values.dtype, len(values), chunk, fields_of(chunk, layout.planes))


@functools.cache
def seeds() -> dict[str, Seed]:
    """Real weights' chunks (the golden tensors') and random ones, keyed by a readable name."""
    rng = np.random.default_rng(29)
    weights = rng.standard_normal(SEED_ELEMENTS) * 0.05
    out = {f"minilm-{name}": seed(t[:SEED_ELEMENTS])
           for name, t in goldens.huffman_tensors().items() if layout_of(t.dtype) is not None}
    for dtype in (ml_dtypes.bfloat16, np.float32, np.float16, ml_dtypes.float8_e5m2):
        dtype = np.dtype(dtype)
        out[f"random-{dtype.name}"] = seed(weights.astype(dtype))
        out[f"random-bits-{dtype.name}"] = seed(rng.integers(0, 256, SEED_ELEMENTS * dtype.itemsize,
                                                             dtype=np.uint8).view(dtype))
    # Stream counts and code lengths the writer does not make, but a reader must take.
    # Fibonacci-like counts make the 12-bit limit bind.
    skewed = np.repeat(np.arange(14, dtype=np.uint8) + 100, [1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377])
    out["built-e4m3-8-streams-12-bits"] = built(rng.permutation(skewed).view(ml_dtypes.float8_e4m3fn), 8, 12)
    out["built-bf16-1-stream"] = built(weights.astype(ml_dtypes.bfloat16), 1, 11)
    out["built-fp32-2-streams"] = built(weights.astype(np.float32), 2, 11)
    # Several of the C decoder's blocks (1024 symbols) per stream.
    long = rng.standard_normal(LONG_ELEMENTS) * 0.05
    out["long-bf16"] = seed(long.astype(ml_dtypes.bfloat16))
    out["long-fp32-8-streams"] = built(long.astype(np.float32), 8, 11)
    out["tiny-bf16"] = seed(np.array([0.5, -1, 2, 0.25, 0.5, 0.5, 1, 0.5], dtype=ml_dtypes.bfloat16))
    return out


@contextlib.contextmanager
def kernels(which):
    """compiled.kernels set to ``which`` (the built kernels or None) for the block."""
    saved = compiled.kernels
    compiled.kernels = which
    try:
        yield
    finally:
        compiled.kernels = saved


def outcome(chunk: bytes, dtype: np.dtype, elements: int, fill: int) -> bytes | None:
    """The decoded bytes, or None where the decoder refuses with FormatError;
    any other exception escapes. ``out`` starts as ``fill`` so that a byte
    a decoder leaves unwritten shows up as a difference between the two."""
    out = np.full(elements * dtype.itemsize, fill, dtype=np.uint8)
    try:
        FloatPlanes().decode_into(chunk, out, layout_of(dtype).planes, dtype=dtype)
    except FormatError:
        return None
    return out.tobytes()


def both_decoders(chunk: bytes, dtype: np.dtype, elements: int) -> bytes | None:
    """The one outcome both decoders give; fails where they differ."""
    with kernels(None):
        reference = outcome(chunk, dtype, elements, 0x5A)
    if KERNELS is None:
        return reference
    with kernels(KERNELS):
        compiled_ = outcome(chunk, dtype, elements, 0xA5)
    assert (compiled_ is None) == (reference is None), (
        f"the C kernels {'refuse' if compiled_ is None else 'decode'} what numpy "
        f"{'refuses' if reference is None else 'decodes'}")
    assert compiled_ == reference, "the C kernels and numpy decode the chunk to different bytes"
    return reference


# --- mutations -----------------------------------------------------------------------------

INTERESTING = st.sampled_from([0, 1, 2, 3, 4, 7, 8, 9, 11, 12, 13, 15, 16, 0x7F, 0x80, 0xFF, 0x100,
                               0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF])
mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 1 << 20), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("field"), st.integers(0, 1 << 20), INTERESTING),
    st.tuples(st.just("nudge"), st.integers(0, 1 << 20), st.integers(-3, 3)),
    st.tuples(st.just("field flip"), st.integers(0, 1 << 20), st.integers(0, 31)),
)


def mutate(chunk: bytes, fields: tuple[Field, ...], edits) -> bytes:
    """The chunk with the edits applied in order; positions wrap around its
    current length, field numbers around the seed's fields (a field past a
    truncation is skipped)."""
    blob = bytearray(chunk)
    for kind, *args in edits:
        if kind == "extend":
            blob += args[0]
        elif not blob:
            continue
        elif kind == "flip":
            blob[args[0] % len(blob)] ^= 1 << args[1]
        elif kind == "set":
            blob[args[0] % len(blob)] = args[1]
        elif kind == "truncate":
            del blob[args[0] % len(blob):]
        else:
            at, width = fields[args[0] % len(fields)]
            if at + width > len(blob):
                continue
            old = int.from_bytes(blob[at : at + width], "little")
            new = {"field": args[1], "nudge": old + args[1], "field flip": old ^ 1 << args[1] % (8 * width)}[kind]
            blob[at : at + width] = (new % (1 << 8 * width)).to_bytes(width, "little")
    return bytes(blob)


def check(name: str, edits, extra: int) -> None:
    s = seeds()[name]
    chunk = mutate(s.chunk, s.fields, edits)
    decoded = both_decoders(chunk, s.dtype, max(1, s.elements + extra))
    if chunk == s.chunk and extra == 0:
        assert decoded is not None and decoded == bytes(_values(s)), "the unharmed seed must decode to itself"


def _values(s: Seed) -> bytes:
    with kernels(None):
        out = np.empty(s.elements * s.dtype.itemsize, np.uint8)
        FloatPlanes().decode_into(s.chunk, out, layout_of(s.dtype).planes, dtype=s.dtype)
    return out.tobytes()


SEED_NAMES = ["minilm-bf16", "minilm-fp32", "minilm-fp16", "minilm-e4m3", "minilm-e8m0", "minilm-fp32_modes",
              "minilm-fp32_const_exponent", "random-bfloat16", "random-float32", "random-float16",
              "random-float8_e5m2", "random-bits-bfloat16", "random-bits-float32", "random-bits-float16",
              "random-bits-float8_e5m2", "built-e4m3-8-streams-12-bits", "built-bf16-1-stream",
              "built-fp32-2-streams", "long-bf16", "long-fp32-8-streams", "tiny-bf16"]
EXTRA = st.sampled_from([0, 0, 0, -1, 1])
FUZZ = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_seeds_cover_every_layout_and_plane_mode():
    # The seeds are worth mutating only if they hold what the mutations aim at.
    got = seeds()
    assert sorted(got) == sorted(SEED_NAMES)
    modes = {m for s in got.values() for m in s.chunk[: layout_of(s.dtype).planes]}
    assert modes == {0, 1, 2}
    assert {layout_of(s.dtype).layout for s in got.values()} == {0, 1, 2}
    huffman = [chunk_layout(s.chunk, layout_of(s.dtype).planes)[1] for s in got.values()]
    assert {streams for plane in huffman for streams in plane} == {1, 2, 4, 8}
    lmax = got["built-e4m3-8-streams-12-bits"].chunk[4 + 4 + 1]  # modes+pad, one length, then S, Lmax
    assert lmax == 12
    for s in got.values():
        assert both_decoders(s.chunk, s.dtype, s.elements) is not None


@settings(max_examples=examples(60), **FUZZ)
@given(name=st.sampled_from(SEED_NAMES), edits=st.lists(mutation, min_size=1, max_size=4), extra=EXTRA)
def test_mutated_chunks_are_refused_or_decoded_alike(name, edits, extra):
    # The quick tier's sample: a few mutants over all the seeds.
    check(name, edits, extra)


@pytest.mark.slow
@pytest.mark.parametrize("name", SEED_NAMES)
@settings(max_examples=int(os.environ.get("LAZYSTORE_FUZZ_EXAMPLES") or examples(500)), **FUZZ)
@given(edits=st.lists(mutation, min_size=1, max_size=8), extra=EXTRA)
def test_mutated_chunks_long_run(name, edits, extra):
    # Every seed, many mutants each, up to 8 edits in a row.
    check(name, edits, extra)


# --- what no decoder can catch (docs/format.md §9.5, "Bits") -----------------------------------


def lone_plane(symbols: list[int]) -> bytes:
    """A one-stream Huffman plane of ``symbols`` (7 coded "0", 3 "10", 9 "11")."""
    lengths = np.zeros(256, np.uint8)
    lengths[[3, 7, 9]] = [2, 1, 2]
    return huffman_code.plane_header(lengths, 1) + huffman_ref.encode_streams(
        np.array(symbols, np.uint8), lengths, 1)


def decoded(blob: bytes, n: int) -> list[int] | None:
    """The plane decoded for ``n`` symbols by both decoders and the spec
    reader, which must agree; None where they refuse."""
    got = []
    for which in (KERNELS, None):
        with kernels(which):
            try:
                got.append(huffman_code.decode_plane(blob, n).tolist())
            except FormatError:
                got.append(None)
    try:
        got.append(list(huffman_plane(blob, n)))
    except SpecError:
        got.append(None)
    assert got[0] == got[1] == got[2]
    return got[0]


def test_a_stream_coded_for_another_count_decodes_when_zero_bits_make_up_the_difference():
    # 5 symbols in 9 bits: 7 zero pad bits, which decode as up to 7 more 7s
    # (the all-zero code, 1 bit). So n = 5..12 all decode, n = 4 (a whole
    # byte left) and n = 13 (the bits run out) are refused: the index's
    # decoded_len decides, and the spec says so.
    coded = [9, 3, 9, 7, 3]
    blob = lone_plane(coded)
    assert decoded(blob, 4) is None and decoded(blob, 13) is None
    for n in range(5, 13):
        assert decoded(blob, n) == coded + [7] * (n - 5)
    # Coded with one all-zero code more than its count: the extra bit and
    # the pad make fewer than 8 bits, so it decodes; two more make a byte.
    assert decoded(lone_plane([9, 3, 9, 3, 7, 7]), 5) == [9, 3, 9, 3, 7]
    assert decoded(lone_plane([9, 3, 9, 3, 7, 7]), 4) is None


# --- regressions -----------------------------------------------------------------------------


def test_float_planes_regressions():
    # Every kept mutant, <dtype>-<elements>-<what>.chunk, replayed through both
    # decoders (none yet: the runs so far found no crash and no disagreement).
    for path in sorted(REGRESSIONS.glob("*.chunk")):
        dtype_name, elements, _ = path.stem.split("-", 2)
        both_decoders(path.read_bytes(), np.dtype(getattr(ml_dtypes, dtype_name, dtype_name)), int(elements))
