""".npz archives read for conversion (lazystore.interop.npz): each member
inflated once, in order, holding a block at a time; parts read exactly as
numpy indexes; every size a member claims checked before it is used."""

from __future__ import annotations

import os
import struct
import zipfile

import numpy as np
import pytest

import lazystore as ls
from lazystore.cli import diff as cli_diff
from lazystore.interop import archives, convert
from lazystore.writing import writer as writer_module
from tests._native.test_streaming import peak_numpy_bytes
from tests.cli.helpers import run

MEMBER = 64 << 20  # a 64 MiB member of zeros deflates to ~64 KiB


@pytest.fixture
def counted_inflations(monkeypatch):
    """Counts every stream started on each .npz member; a third start of one
    member (its header, then its data, are the two it needs) fails the test
    at once, so a reader that inflates per block fails fast instead of
    taking minutes."""
    starts: dict[str, int] = {}
    real_open = zipfile.ZipFile.open

    def counting_open(self, name, *args, **kwargs):
        member = getattr(name, "filename", name)
        if member.endswith(".npy"):
            starts[member] = starts.get(member, 0) + 1
            assert starts[member] <= 2, f"{member} inflated again ({starts[member]} starts)"
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", counting_open)
    return starts


@pytest.fixture
def small_blocks(monkeypatch):
    """Copy blocks and writer windows of 64 KiB: a 64 MiB member is 1,024 block reads."""
    monkeypatch.setattr(convert, "COPY_BLOCK_BYTES", 64 << 10)
    monkeypatch.setattr(writer_module, "WINDOW_BYTES", 64 << 10)


@pytest.fixture
def zeros_npz(tmp_path):
    path = tmp_path / "z.npz"
    np.savez_compressed(path, big=np.zeros((MEMBER // 4096, 1024), np.float32), small=np.arange(5))
    assert os.path.getsize(path) < MEMBER // 100
    return path


@pytest.mark.slow
def test_converting_inflates_each_member_once_holding_a_block(tmp_path, zeros_npz, small_blocks,
                                                                counted_inflations):
    peak = peak_numpy_bytes(lambda: convert.from_npz(zeros_npz, tmp_path / "z.lzy"))
    assert counted_inflations == {"big.npy": 2, "small.npy": 2}
    assert peak < 8 << 20, f"converting a 64 MiB member peaked at {peak / 2**20:.1f} MiB"
    with ls.open(tmp_path / "z.lzy") as ck:
        assert ck.info("big").shape == (MEMBER // 4096, 1024) and not ck["big"].any()
        assert np.array_equal(ck["small"], np.arange(5))


@pytest.mark.slow
def test_cli_convert_and_diff_inflate_each_member_once(capsys, monkeypatch, tmp_path, zeros_npz, small_blocks,
                                                        counted_inflations):
    monkeypatch.setattr(cli_diff, "DIFF_BLOCK_BYTES", 1 << 20)  # 64 blocks: diff's per-block work is slower
    assert run(capsys, "convert", zeros_npz, tmp_path / "z.lzy")[0] == 0
    counted_inflations.clear()
    peak = peak_numpy_bytes(lambda: run(capsys, "diff", zeros_npz, tmp_path / "z.lzy"))
    assert counted_inflations == {"big.npy": 2, "small.npy": 2}
    assert peak < 8 << 20, f"diffing a 64 MiB member peaked at {peak / 2**20:.1f} MiB"


F = np.asfortranarray(np.arange(6 * 5 * 4, dtype=np.int32).reshape(6, 5, 4))
C = np.arange(7 * 6 * 5, dtype=np.float64).reshape(7, 6, 5)
INDEXES = [(), (slice(None),), (2,), (-1, 3), (slice(1, 5), slice(None), 2), (slice(None, None, -2), 1),
           (..., slice(3, 0, -1)), (None, 4, ..., None), (slice(2, 2),), (1, 2, 3), (slice(5, 0, -3), slice(1, 6, 2))]


@pytest.mark.parametrize("deflated", [True, False])
def test_parts_are_what_numpy_indexing_gives_in_any_order(tmp_path, deflated):
    save = np.savez_compressed if deflated else np.savez
    save(tmp_path / "a.npz", c=C, f=F, s=np.float32(2.5), e=np.zeros((0, 3)))
    with archives.open_npz(tmp_path / "a.npz") as view:
        # Forwards, backwards and across members: a read behind the stream starts it again.
        for index in INDEXES + INDEXES[::-1]:
            for name, a in (("c", C), ("f", F)):
                got, want = view.get_slice(name)[index], a[index]
                assert got.shape == want.shape and np.array_equal(got, want), (name, index)
        assert view.get_slice("s")[()] == np.float32(2.5) and view["s"].shape == ()
        assert view.get_slice("e")[1:].shape == (0, 3) and view["e"].shape == (0, 3)
        assert np.array_equal(view["c"], C) and np.array_equal(view["f"], F)


# -- sizes a member claims ------------------------------------------------------------------


def _npy(shape_text: str, data: bytes) -> bytes:
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape_text + ", }").encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data


def _zip(path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)


def _set_claimed_size(path, size: int) -> None:
    """Write ``size`` as the first member's uncompressed size in the central
    directory (what zipfile trusts)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"PK\x01\x02")
    data[at + 24:at + 28] = struct.pack("<I", size)
    path.write_bytes(bytes(data))


def test_a_header_claiming_more_than_its_member_holds_is_refused(tmp_path):
    path = tmp_path / "lie.npz"
    _zip(path, {"w.npy": _npy("(1000000000000,)", np.zeros(1000, np.float32).tobytes())})
    with pytest.raises(ls.FormatError, match=r"'w'.*header says"):
        convert.from_npz(path, tmp_path / "out.lzy")
    assert not (tmp_path / "out.lzy").exists()


def test_a_size_deflate_cannot_reach_is_refused(tmp_path):
    path = tmp_path / "lie.npz"
    _zip(path, {"w.npy": _npy("(1000,)", np.zeros(1000, np.float32).tobytes())})
    _set_claimed_size(path, 0xFFFF_FF00)
    with pytest.raises(ls.FormatError, match="more than its compression can expand to"):
        archives.open_npz(path)


def test_a_member_shorter_than_claimed_is_refused_on_read(tmp_path):
    path = tmp_path / "short.npz"
    data = np.arange(1000, dtype=np.float32).tobytes()
    _zip(path, {"w.npy": _npy("(1000,)", data)})
    _set_claimed_size(path, len(_npy("(1000,)", data)) + 4000)  # the header's 1000 elements would need 4000 more
    with pytest.raises(ls.FormatError, match="'w'"):
        convert.from_npz(path, tmp_path / "out.lzy")
    assert not (tmp_path / "out.lzy").exists()


@pytest.mark.parametrize("deflated", [True, False])
def test_a_damaged_member_is_a_format_error_naming_it(tmp_path, monkeypatch, deflated):
    monkeypatch.setattr(convert, "COPY_BLOCK_BYTES", 4096)  # the damage is found only at the member's end
    path = tmp_path / "bad.npz"
    rng = np.random.default_rng(0)
    (np.savez_compressed if deflated else np.savez)(path, w=rng.integers(0, 4, 50_000).astype(np.float32))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x55  # inside the member's bytes: a broken stream, or only its CRC-32 tells
    path.write_bytes(bytes(data))
    with pytest.raises(ls.FormatError, match="'w'"):
        convert.from_npz(path, tmp_path / "out.lzy")
    assert not (tmp_path / "out.lzy").exists()


def test_a_name_twice_is_refused(tmp_path):
    path = tmp_path / "twice.npz"
    with pytest.warns(UserWarning, match="Duplicate name"):
        _zip(path, {"w.npy": _npy("(1,)", b"\0" * 4)})
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("w.npy", _npy("(1,)", b"\1" * 4))
    with pytest.raises(ls.FormatError, match="twice"):
        archives.open_npz(path)
