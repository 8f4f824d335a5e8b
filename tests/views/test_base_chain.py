"""Reading delta files through their chain of bases (docs/format.md §9.3).

Every byte that feeds a decode is checked (a raw base too), the chain's
length is bounded and walked without recursion, a base is opened only as a
regular file beside the delta, an open view holds its bases, and a size a
delta claims is bounded by its base before anything is allocated.
"""

from __future__ import annotations

import gc
import os
import sys
import tracemalloc

import numpy as np
import pytest

import lazystore as ls
from lazystore._native.base_ref import MAX_CHAIN
from tests.properties.test_hostile import Parts
from tests.sources.special_files import make_device, make_fifo, make_socket

W = np.arange(4096, dtype=np.float32).reshape(64, 64) / 7


def _step(k: int) -> dict:
    """Checkpoint ``k`` of a series: w moves a little every step, b never."""
    return {"w": W + np.float32(k) * 1e-3, "b": np.arange(10, dtype=np.int64)}


def _series(folder, n: int, *, keyframe_compression=None, **options) -> list:
    """``n`` files, each a delta against the one before; the first a keyframe."""
    paths = [folder / f"s{k:03d}.lzy" for k in range(n)]
    ls.save(_step(0), paths[0], compression=keyframe_compression, **options)
    for k in range(1, n):
        ls.save(_step(k), paths[k], base=paths[k - 1], **options)
    return paths


def _flip(path, name: str, at: int = 100) -> None:
    """Flip one bit of tensor ``name``'s stored bytes, in place."""
    with ls.open(path) as ck:
        offset = ck.info(name).offset
    with open(path, "r+b") as f:
        f.seek(offset + at)
        byte = f.read(1)[0]
        f.seek(offset + at)
        f.write(bytes([byte ^ 0x01]))


def _every_read(path, **open_options):
    """Each way of reading tensor w of ``path``, as a callable."""
    def item():
        with ls.open(path, **open_options) as ck:
            return ck["w"]

    def part():
        with ls.open(path, **open_options) as ck:
            return ck.get_slice("w")[1:3]

    def load():
        with ls.open(path, **open_options) as ck:
            return ck.load()["w"]

    return {"item": item, "get_slice": part, "load": load, "ls.load": lambda: ls.load(path)["w"]}


# -- every byte that feeds a decode is checked ----------------------------------------------


@pytest.mark.parametrize("mmap", [True, False], ids=["mapped", "fetched"])
def test_a_flipped_bit_in_a_raw_base_is_never_decoded_into_the_delta(tmp_path, mmap):
    paths = _series(tmp_path, 3)  # a raw keyframe, a delta, a delta of the delta
    _flip(paths[0], "w")
    for top in paths[1:]:
        for how, read in _every_read(top, mmap=mmap).items():
            with pytest.raises(ls.ChecksumError, match=r"s000\.lzy") as exc:
                read()
            assert "tensor 'w' chunk 0" in str(exc.value), how
        with ls.open(top, mmap=mmap) as ck:
            assert ck.verify() == ["w"]
            assert ck["b"].tolist() == list(range(10))  # b's chain is intact


def test_a_manager_restore_of_a_delta_over_a_damaged_raw_keyframe_raises(tmp_path):
    mgr = ls.CheckpointManager(tmp_path, delta=True)  # no compression: the keyframe is raw
    mgr.save(1, _step(1))
    mgr.save(2, _step(2))  # whole, and 1 coded against it
    keyframe = mgr.path(2)
    with ls.open(mgr.path(1)) as ck:
        assert ck.base == os.fspath(keyframe)
    _flip(keyframe, "w")
    with pytest.raises(ls.ChecksumError, match=keyframe.name):
        mgr.restore(1)


# -- the chain's length --------------------------------------------------------------------


@pytest.fixture(scope="module")
def longest(tmp_path_factory):
    """A delta file with the most bases a reader follows below it."""
    return _series(tmp_path_factory.mktemp("longest"), MAX_CHAIN + 1)


def _depth() -> int:
    frame, n = sys._getframe(), 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


def _at_depth(frames: int, fn):
    """``fn()`` called ``frames`` deep in the call stack."""
    if _depth() >= frames:
        return fn()
    return _at_depth(frames, fn)


@pytest.mark.slow
def test_the_longest_chain_reads_back_even_from_a_deep_call_stack(longest):
    top = longest[-1]
    want = _step(MAX_CHAIN)
    deep = sys.getrecursionlimit() - 100  # lazystore has 100 frames left

    def read():
        with ls.open(top) as ck:
            return ck["w"], ck.get_slice("w")[3], ck.verify(), ls.load(top)["w"]

    whole, row, failing, loaded = _at_depth(deep, read)
    assert whole.tobytes() == want["w"].tobytes() == loaded.tobytes()
    assert row.tobytes() == want["w"][3].tobytes() and failing == []


def test_a_chain_longer_than_the_limit_is_refused_naming_the_base(longest, tmp_path):
    # Files are moved together with their bases, names kept: the chain below grows by one.
    for p in longest:
        os.link(p, tmp_path / p.name)
    top = tmp_path / "over.lzy"
    from lazystore.writing import delta_writer

    # The writer refuses this (see tests/_native/test_delta.py); an older or foreign writer might not.
    real = delta_writer.MAX_CHAIN
    delta_writer.MAX_CHAIN = MAX_CHAIN + 1
    try:
        ls.save(_step(MAX_CHAIN + 1), top, base=tmp_path / longest[-1].name)
    finally:
        delta_writer.MAX_CHAIN = real
    with ls.open(top) as ck:
        with pytest.raises(ls.BaseCheckpointError, match=rf"s000\.lzy .*more than {MAX_CHAIN} bases"):
            ck["w"]


# -- what a base name resolves to ------------------------------------------------------------


def _delta_of_a_base_named(tmp_path, make_base):
    """A delta file ``c.lzy`` whose base name, ``b.lzy``, is then made by
    ``make_base(path)`` (after the real base is moved away)."""
    ls.save(_step(0), tmp_path / "b.lzy")
    ls.save(_step(1), tmp_path / "c.lzy", base=tmp_path / "b.lzy")
    os.replace(tmp_path / "b.lzy", tmp_path / "real.lzy")
    make_base(tmp_path / "b.lzy")
    return tmp_path / "c.lzy"


def _folder(path):
    path.mkdir()


def _link_out_of_the_folder(path):
    outside = path.parent / "elsewhere"
    outside.mkdir()
    os.replace(path.parent / "real.lzy", outside / "b.lzy")
    path.symlink_to(outside / "b.lzy")


def _dangling_link(path):
    path.symlink_to(path.parent / "nothing.lzy")


@pytest.mark.parametrize("make_base, why", [
    (make_fifo, "not a regular file"), (make_device, "not a regular file"), (make_socket, "not a regular file"),
    (_folder, "not a regular file"), (_link_out_of_the_folder, "link out of the folder"),
    (_dangling_link, "missing"),
], ids=["fifo", "device", "socket", "folder", "link-out", "dangling-link"])
def test_a_base_that_is_not_a_regular_file_beside_the_delta_is_refused(tmp_path, make_base, why):
    top = _delta_of_a_base_named(tmp_path, make_base)
    reads = [lambda: ls.open(top)["w"], lambda: ls.load(top), lambda: ls.open(top).verify(),
             lambda: ls.open(top, mmap=False)["w"]]
    for read in reads:  # never a hang, never a raw OSError
        with pytest.raises(ls.BaseCheckpointError, match=rf"b\.lzy .*{why}"):
            read()


def test_a_link_to_a_file_in_the_same_folder_is_followed(tmp_path):
    top = _delta_of_a_base_named(tmp_path, lambda p: p.symlink_to("real.lzy"))
    assert ls.load(top)["w"].tobytes() == _step(1)["w"].tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["%2E%2E", "..#x", "..?q=", "%2e%2E", "a%2Fb"])
def test_a_remote_base_name_never_asks_for_another_url(tmp_path, name):
    from lazystore.testing.rangeserver import RangeServer

    ls.save(_step(0), tmp_path / "b.lzy")
    ls.save(_step(1), tmp_path / "c.lzy", base=tmp_path / "b.lzy")
    parts = Parts.parse((tmp_path / "c.lzy").read_bytes())
    parts.metadata = parts.metadata.replace(b'"file":"b.lzy"', f'"file":"{name}"'.encode())
    parts.trailer["minor"] = parts.data[10]  # the delta file's, as its preamble states it
    base = (tmp_path / "b.lzy").read_bytes()
    with RangeServer({"d/c.lzy": parts.build(), "d/b.lzy": base, "d": base, "": base}) as server:
        with ls.open(server.url("d/c.lzy")) as ck:
            with pytest.raises(ls.BaseCheckpointError, match="URL"):
                ck["w"]
        assert {r.path for r in server.requests} == {"/d/c.lzy"}


@pytest.mark.slow
def test_a_remote_chain_is_read_and_checked(tmp_path):
    from lazystore.testing.rangeserver import RangeServer

    paths = _series(tmp_path, 3)  # a raw keyframe: fetched, every byte is checked
    files = {f"d/{p.name}": p.read_bytes() for p in paths}
    with RangeServer(files) as server:
        top = server.url(f"d/{paths[-1].name}")
        with ls.open(top) as ck:
            assert ck.base == server.url(f"d/{paths[1].name}")
            assert ck["w"].tobytes() == _step(2)["w"].tobytes() and ck.verify() == []
        damaged = bytearray(files["d/s000.lzy"])
        with ls.open(paths[0]) as ck:
            damaged[ck.info("w").offset + 7] ^= 0x20
        server.files["d/s000.lzy"] = bytes(damaged)
        with ls.open(top) as ck, pytest.raises(ls.ChecksumError, match=r"s000\.lzy"):
            ck["w"]


# -- an open view holds its bases --------------------------------------------------------------


def test_an_open_view_keeps_reading_after_its_bases_are_deleted(tmp_path):
    paths = _series(tmp_path, 4, keyframe_compression="zstd")
    with ls.open(paths[-1]) as ck, ls.open(paths[-1], mmap=False) as unmapped:
        for p in paths[:-1]:
            p.unlink()
        assert ck["w"].tobytes() == _step(3)["w"].tobytes()
        assert unmapped.get_slice("w")[2:4].tobytes() == _step(3)["w"][2:4].tobytes()
        assert ck.verify() == []
    with ls.open(paths[-1]) as ck, pytest.raises(ls.BaseCheckpointError, match="missing"):
        ck["w"]


def test_a_base_replaced_after_the_view_opened_is_not_read(tmp_path):
    paths = _series(tmp_path, 2)
    with ls.open(paths[1]) as ck:
        ls.save({"w": np.zeros_like(W), "b": np.zeros(10, np.int64)}, paths[0])  # another file, same name
        assert ck["w"].tobytes() == _step(1)["w"].tobytes()  # decoded against the base it opened with


def test_a_view_of_a_long_chain_holds_each_base_with_one_descriptor_at_most(longest):
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc/self/fd")

    def held() -> int:
        before = len(os.listdir("/proc/self/fd"))
        with ls.open(longest[-1]) as ck:
            assert ck["w"].tobytes() == _step(MAX_CHAIN)["w"].tobytes()
            return len(os.listdir("/proc/self/fd")) - before

    gc.collect()  # descriptors earlier tests left to the collector must not close mid-count (random order)
    before = len(os.listdir("/proc/self/fd"))
    # The file itself: a descriptor and its mapping's; each base: its mapping's, before Python 3.13 only.
    assert held() <= 2 + (MAX_CHAIN if sys.version_info < (3, 13) else 0)
    assert len(os.listdir("/proc/self/fd")) == before  # all given back with the view


# -- a size a delta claims is bounded by its base ----------------------------------------------


def test_a_delta_claiming_a_huge_tensor_is_refused_before_allocating(tmp_path):
    ls.save({"w": np.zeros(16, np.uint8)}, tmp_path / "b.lzy")
    ls.save({"w": np.zeros(16, np.uint8)}, tmp_path / "c.lzy", base=tmp_path / "b.lzy")
    parts = Parts.parse((tmp_path / "c.lzy").read_bytes())
    huge = 1 << 40  # 1 TiB, in one unchanged chunk: zero stored bytes
    parts.set_dims(0, [huge])
    parts.entries["nbytes"][0] = huge
    parts.entries["chunk_extent"][0] = huge
    parts.trailer["minor"] = parts.data[10]  # the delta file's, as its preamble states it
    (tmp_path / "c.lzy").write_bytes(parts.build())
    assert os.path.getsize(tmp_path / "c.lzy") < 1024
    reads = [lambda: ls.open(tmp_path / "c.lzy")["w"], lambda: ls.load(tmp_path / "c.lzy"),
             lambda: ls.open(tmp_path / "c.lzy").get_slice("w")[:], lambda: ls.open(tmp_path / "c.lzy").verify()]
    tracemalloc.start()
    try:
        for read in reads:
            with pytest.raises(ls.BaseCheckpointError, match=r"b\.lzy .*holds tensor 'w' as uint8 \(16,\)"):
                read()
        assert tracemalloc.get_traced_memory()[1] < 16 << 20
    finally:
        tracemalloc.stop()
