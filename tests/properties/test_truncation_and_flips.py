"""Every byte of a file is covered: truncation, extension and single-byte
flips anywhere are detected, and version fields are handled as documented.

Everything goes through the public API (``ls.save``/``ls.open``); the only
format knowledge used is the fixed preamble/trailer layout, to patch version
fields.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import lazystore as ls

MAGIC = b"\x89LZY\r\n\x1a\n"
PREAMBLE_MAJOR = 8  # u16 after the 8-byte magic
PREAMBLE_MINOR = 10
TRAILER_SIZE = 40
# Trailer: index_offset u64, index_length u64, index_xxh3 u64, major u16,
# minor u16, reserved u32, magic[8]; offsets from the end of the file.
TRAILER_MAJOR = -16
TRAILER_MINOR = -14


def small_tensors() -> dict[str, np.ndarray]:
    return {
        "w": np.arange(6, dtype=np.float32).reshape(2, 3),  # raw: too small to compress
        "z": np.zeros((64, 4), dtype=np.float32),  # compresses well: zstd byte planes
        "i": np.arange(-5, 5, dtype=np.int8),  # raw
    }


@pytest.fixture
def small_file(tmp_path):
    path = tmp_path / "small.lzy"
    ls.save(small_tensors(), path, compression="zstd", metadata={"step": 3, "note": "héllo"})
    data = path.read_bytes()
    assert len(data) < 2048
    with ls.open(path) as ck:
        infos = {name: ck.info(name) for name in ck}
        assert ck.verify() == []
    # The file must exercise both kinds of chunk, or the flip test proves little.
    assert infos["z"].compression == "zstd"
    assert infos["w"].compression is None and infos["i"].compression is None
    return path, data, infos


def write(path, data: bytes):
    path.write_bytes(data)
    return path


def patch_u16(data: bytes, offset: int, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into("<H", buf, offset % len(buf), value)
    return bytes(buf)


# --- truncation and extension -----------------------------------------------


@pytest.mark.slow
def test_every_truncation_is_a_format_error(small_file, tmp_path):
    _, data, _ = small_file
    path = tmp_path / "truncated.lzy"
    for length in range(len(data)):
        write(path, data[:length])
        with pytest.raises(ls.FormatError):
            ls.open(path).close()


@pytest.mark.slow
def test_every_truncation_of_a_larger_file_tail_is_a_format_error(tmp_path):
    # A file whose index holds many entries: cuts inside the index, the
    # trailer and the data of later tensors, with a longer file than above.
    tensors = {f"t{i:03d}": np.full((3, 5), i, dtype=np.int16) for i in range(40)}
    src = tmp_path / "many.lzy"
    ls.save(tensors, src, metadata={"k": list(range(50))})
    data = src.read_bytes()
    path = tmp_path / "truncated.lzy"
    for length in range(0, len(data), 7):
        write(path, data[:length])
        with pytest.raises(ls.FormatError):
            ls.open(path).close()


@pytest.mark.parametrize("extra", [b"\0", b"\x01", MAGIC, b"\0" * 64])
def test_appended_bytes_are_a_format_error(small_file, tmp_path, extra):
    _, data, _ = small_file
    path = write(tmp_path / "extended.lzy", data + extra)
    with pytest.raises(ls.FormatError):
        ls.open(path).close()


def test_prepended_byte_is_a_format_error(small_file, tmp_path):
    _, data, _ = small_file
    path = write(tmp_path / "shifted.lzy", b"\0" + data)
    with pytest.raises(ls.FormatError):
        ls.open(path).close()


# --- single-byte flips --------------------------------------------------------


def chunk_owner(infos, offset: int) -> str | None:
    """The tensor whose stored bytes contain ``offset`` (chunks of one tensor
    are contiguous from ``info.offset`` for ``info.stored_nbytes`` bytes)."""
    for name, info in infos.items():
        if info.offset <= offset < info.offset + info.stored_nbytes:
            return name
    return None


def detected(path) -> bool:
    """Does opening or verifying report the corruption?"""
    try:
        ck = ls.open(path)
    except ls.FormatError:
        return True
    with ck:
        try:
            return ck.verify() != []
        except ls.FormatError:
            return True


@pytest.mark.slow
@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
def test_every_single_byte_flip_is_detected(small_file, tmp_path, mask):
    _, data, infos = small_file
    undetected, wrong = [], []
    in_chunks = 0
    for offset in range(len(data)):
        buf = bytearray(data)
        buf[offset] ^= mask
        path = write(tmp_path / f"flip_{mask:02x}_{offset}.lzy", bytes(buf))
        owner = chunk_owner(infos, offset)
        if owner is None:
            if not detected(path):
                undetected.append(offset)
        else:
            in_chunks += 1
            # Data bytes: the index is intact, so the file opens; verify names
            # exactly the damaged tensor and reading it fails its checksum.
            with ls.open(path) as ck:
                failing = ck.verify()
                if failing != [owner]:
                    wrong.append((offset, owner, "verify", failing))
                for other in infos:
                    if other != owner:
                        np.testing.assert_array_equal(ck[other], small_tensors()[other])
                if infos[owner].compression is not None:
                    # Compressed chunks are always checked when decoded.
                    with pytest.raises(ls.ChecksumError):
                        ck[owner]
                    with pytest.raises(ls.ChecksumError):
                        ck.get_slice(owner)[0]
                    with pytest.raises(ls.ChecksumError):
                        ck.load([owner])
            if infos[owner].compression is None:
                with ls.open(path, verify=True) as ck:
                    with pytest.raises(ls.ChecksumError):
                        ck[owner]
                with ls.open(path, verify=True) as ck:
                    with pytest.raises(ls.ChecksumError):
                        ck.get_slice(owner)[:]
                with pytest.raises(ls.ChecksumError):
                    ls.load(path, verify=True)
        path.unlink()
    assert undetected == [], f"flips (xor {mask:#04x}) not detected at offsets {undetected}"
    assert wrong == []
    assert in_chunks == sum(i.stored_nbytes for i in infos.values())


def test_flip_in_raw_chunk_read_without_verify_returns_data(small_file, tmp_path):
    # Documented behaviour: raw tensors are zero-copy views checked only on
    # request, so an unverified read returns the (damaged) bytes, no error.
    _, data, infos = small_file
    buf = bytearray(data)
    buf[infos["w"].offset] ^= 0xFF
    path = write(tmp_path / "flip.lzy", bytes(buf))
    with ls.open(path) as ck:
        assert ck["w"].shape == (2, 3)
        assert ck.verify() == ["w"]


# --- versions ---------------------------------------------------------------------


def test_newer_major_version_is_unsupported(small_file, tmp_path):
    _, data, _ = small_file
    patched = patch_u16(patch_u16(data, PREAMBLE_MAJOR, 2), TRAILER_MAJOR, 2)
    path = write(tmp_path / "v2.lzy", patched)
    with pytest.raises(ls.UnsupportedVersionError) as info:
        ls.open(path)
    message = str(info.value)
    assert "newer" in message
    assert "upgrade" in message
    assert "2." in message  # names the file's version
    assert isinstance(info.value, ls.FormatError) and isinstance(info.value, ValueError)


def test_newer_major_only_in_trailer_is_unsupported(small_file, tmp_path):
    _, data, _ = small_file
    path = write(tmp_path / "v2t.lzy", patch_u16(data, TRAILER_MAJOR, 2))
    with pytest.raises(ls.UnsupportedVersionError):
        ls.open(path)


def test_major_version_zero_is_a_format_error(small_file, tmp_path):
    _, data, _ = small_file
    patched = patch_u16(patch_u16(data, PREAMBLE_MAJOR, 0), TRAILER_MAJOR, 0)
    path = write(tmp_path / "v0.lzy", patched)
    with pytest.raises(ls.FormatError) as info:
        ls.open(path)
    assert not isinstance(info.value, ls.UnsupportedVersionError)


def test_newer_minor_version_is_accepted(small_file, tmp_path):
    _, data, _ = small_file
    patched = patch_u16(patch_u16(data, PREAMBLE_MINOR, 5), TRAILER_MINOR, 5)
    path = write(tmp_path / "v1_5.lzy", patched)
    with ls.open(path) as ck:
        assert ck.format_version == (1, 5)
        assert ck.verify() == []
        for name, expected in small_tensors().items():
            np.testing.assert_array_equal(ck[name], expected)
        assert ck.metadata == {"step": 3, "note": "héllo"}


def test_minor_versions_that_differ_are_a_format_error(small_file, tmp_path):
    _, data, _ = small_file
    path = write(tmp_path / "mixed.lzy", patch_u16(data, TRAILER_MINOR, 5))
    with pytest.raises(ls.FormatError):
        ls.open(path)


# --- not a lazystore file --------------------------------------------------------------


def safetensors_like() -> bytes:
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "__metadata__": {}}
    ).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + np.arange(6, dtype=np.float32).tobytes()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\0",
        MAGIC,
        MAGIC * 7,  # 56 bytes: right magic at both ends, nothing else valid
        bytes(56),
        bytes(4096),
        np.random.default_rng(0).bytes(1000),
        np.random.default_rng(1).bytes(100_000),
        b"PK\x03\x04" + bytes(200),  # a zip (torch.save) header
        b"\x80\x02}q\x00." + bytes(100),  # a pickle
    ],
    ids=["empty", "one-byte", "magic-only", "magic-x7", "zeros-56", "zeros-4k", "random-1k",
         "random-100k", "zip", "pickle"],
)
def test_not_a_lazystore_file(tmp_path, content):
    path = write(tmp_path / "other.bin", content)
    with pytest.raises(ls.FormatError):
        ls.open(path)
    with pytest.raises(ls.FormatError):
        ls.load(path)


def test_safetensors_files_now_open(tmp_path):
    # ls.open reads safetensors too (tests/interop/test_safetensors.py); once refused here.
    path = write(tmp_path / "other.bin", safetensors_like())
    with ls.open(path) as ck:
        assert ck.format == "safetensors" and ck["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        ls.open(tmp_path / "missing.lzy")
    with pytest.raises(FileNotFoundError):
        ls.load(tmp_path / "missing.lzy")
