"""Format 1.5 golden files: tests/data/golden_v1_5_huffman.lzy (codec 4
beside codec 1) and golden_v1_5_sealed.lzy (codec 132 beside 128) are frozen.

tests/data/make_goldens_v1_5.py wrote them (with zstandard 0.25.0, libzstd
1.5.7) and defines their tensors, which these tests import from it. Never
regenerate them to make a test pass: a failure means the writer's bytes
drifted, or old files no longer read back the same (see test_golden.py).
Regenerate them only with a deliberate change of what the writer stores
(its Huffman stream count, say), and then update the sizes and SHA-256s
below.

Here: the writer reproduces both files byte for byte, with the C kernels
and with the numpy reference (``compiled.kernels = None``); ``ls.load``
reads them back bit for bit with both decoders; and the files hold the
cases they were made for (docs/design/29-exponent-coder.md §7), read from
their chunks' bytes. The spec reader reads golden_v1_5_huffman.lzy in
test_spec_reader.py (``GOLDENS_1_5``) and decrypts golden_v1_5_sealed.lzy
in test_golden_sealed.py.
"""

from __future__ import annotations

import importlib.util
import struct

import pytest

import lazystore as ls
from lazystore.codecs import compiled
from tests.paths import DATA
from tests.properties.test_golden import committed, same_zstd
from tests.properties.test_spec_reader import SpecFile, SpecVersionError


def _load_maker():
    spec = importlib.util.spec_from_file_location("make_goldens_v1_5", DATA / "make_goldens_v1_5.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


goldens = _load_maker()  # the script that made the files: their tensors, key and salt

HUFFMAN_SIZE = 25425
HUFFMAN_SHA256 = "4121f2cfe108f92e8b7c085c6df73bb04e3107f764de23d1839042599c35ba0e"
SEALED_SIZE = 7601
SEALED_SHA256 = "07e2f9d8c2024fa403870878ef12e70ef16eea984c96a4192fdb097b7b7862af"


def huffman_golden() -> bytes:
    return committed(goldens.HUFFMAN, HUFFMAN_SIZE, HUFFMAN_SHA256)


def sealed_golden() -> bytes:
    return committed(goldens.SEALED, SEALED_SIZE, SEALED_SHA256)


@pytest.fixture(params=["kernels", "numpy"])
def coder(request, monkeypatch):
    """The C kernels (where built), or the numpy reference everywhere:
    both write and read the same bytes."""
    if request.param == "numpy":
        monkeypatch.setattr(compiled, "kernels", None)
    elif compiled.kernels is None:
        pytest.skip("the C kernels are not built here")
    return request.param


def same_arrays(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for name, value in want.items():
        assert (got[name].dtype, got[name].shape) == (value.dtype, value.shape), name
        assert got[name].tobytes() == value.tobytes(), name


# --- the writer still writes exactly these bytes -----------------------------------------------


@same_zstd
def test_the_writer_reproduces_the_huffman_golden(tmp_path, coder):
    goldens.write_huffman(tmp_path / "again.lzy")
    assert (tmp_path / "again.lzy").read_bytes() == huffman_golden()


@same_zstd
def test_the_writer_reproduces_the_sealed_golden(tmp_path, coder):
    pytest.importorskip("cryptography")
    goldens.write_sealed(tmp_path / "again.lzy")
    assert (tmp_path / "again.lzy").read_bytes() == sealed_golden()


# --- lazystore reads them back -----------------------------------------------------------------


def test_lazystore_reads_the_huffman_golden(coder):
    huffman_golden()
    with ls.open(goldens.HUFFMAN) as ck:
        assert ck.format_version == (1, 5) and ck.metadata == goldens.METADATA
        assert [ck.info(n).compression for n in ck] == ["huffman"] * 7 + ["zstd"]
        assert ck.verify() == []
    same_arrays(ls.load(goldens.HUFFMAN), goldens.huffman_tensors())


def test_lazystore_reads_the_sealed_golden(coder):
    pytest.importorskip("cryptography")
    sealed_golden()
    with ls.open(goldens.SEALED, encryption_key=goldens.KEY) as ck:
        assert ck.format_version == (1, 5) and ck.metadata == goldens.METADATA
        assert [ck.info(n).compression for n in ck] == ["sealed+huffman", "sealed"]
        assert ck.verify() == []
    same_arrays(ls.load(goldens.SEALED, encryption_key=goldens.KEY), goldens.sealed_tensors())
    with pytest.raises(ls.EncryptionKeyError):
        ls.open(goldens.SEALED, encryption_key=bytes(32))


def test_a_1_4_reader_refuses_the_huffman_golden_as_a_newer_version():
    huffman_golden()
    with pytest.raises(SpecVersionError, match=r"format 1\.5 and uses codec 4.*newer reader"):
        SpecFile(goldens.HUFFMAN, reader_minor=4, codecs=(0, 1))


# --- what the files hold -----------------------------------------------------------------------


def chunk_layout(blob: bytes, planes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A codec-4 chunk's plane modes (0 raw, 1 zstd, 2 Huffman) and each
    Huffman plane's stream count S, read from its bytes (format.md §9.5)."""
    at = -(-planes // 4) * 4
    lengths = struct.unpack_from(f"<{planes}I", blob, at)
    at += 4 * planes
    streams = []
    for mode, length in zip(blob[:planes], lengths):
        if mode == 2:
            streams.append(blob[at])
        at += length
    return tuple(blob[:planes]), tuple(streams)


# name: (codec, [(elements, plane modes, Huffman stream counts) per chunk])
HOLDS = {
    "bf16": (4, [(4096, (0, 2), (4,)), (700, (0, 1), ())]),  # a short last chunk: under HUFFMAN_MIN_SYMBOLS, zstd
    "fp32": (4, [(2048, (0, 0, 0, 2), (4,)), (300, (0, 0, 0, 1), ())]),
    "fp16": (4, [(2304, (0, 2), (4,))]),
    "e4m3": (4, [(512, (1,), ())]),  # a small plane: zstd
    "e8m0": (4, [(4096, (2,), (4,))]),
    "fp32_modes": (4, [(2048, (1, 0, 0, 2), (4,))]),  # all three modes in one chunk
    "fp32_const_exponent": (4, [(2048, (1, 1, 1, 1), ())]),  # one exponent: stored zstd
    "steps": (1, [(27, None, None)]),
}


def test_the_huffman_golden_holds_every_case_it_was_made_for():
    huffman_golden()
    with SpecFile(goldens.HUFFMAN) as f:
        got = {}
        for name, e in f.entries.items():
            chunks = []
            for at, stored, _, _, decoded in e["chunks"]:
                blob = f.read(at, stored)
                modes = chunk_layout(blob, e["planes"]) if e["codec"] == 4 else (None, None)
                chunks.append((decoded // e["dtype"].itemsize, *modes))
            got[name] = (e["codec"], chunks)
    assert got == HOLDS
