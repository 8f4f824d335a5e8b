"""Delta files (format 1.3; 1.2 still read): ``ls.save(obj, path, base=earlier)`` and reading them back."""

from __future__ import annotations

import os
import struct

import ml_dtypes  # noqa: F401 - registers the dtypes ls.DTYPES names
import numpy as np
import pytest

import lazystore as ls
from lazystore._native import layout as fmt
from lazystore.codecs import CODECS_BY_ID
from tests.cli.helpers import run
from tests.paths import DATA

rng = np.random.default_rng(7)


def _trained_like(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.05


def _nudged(a: np.ndarray, scale=1e-4, seed=1) -> np.ndarray:
    """``a`` after a small optimizer step: every element changes in its low bits."""
    step = np.random.default_rng(seed).standard_normal(a.shape).astype(a.dtype) * scale * np.abs(a)
    return (a + step).astype(a.dtype)


def _same_bytes(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert got[k].tobytes() == want[k].tobytes(), k


@pytest.fixture
def chain(tmp_path):
    """Three checkpoints: a keyframe and two deltas, each against the one before."""
    a = {"w": _trained_like((256, 1024)), "frozen": _trained_like((64, 512), seed=3),
         "step": np.array(1, np.int64), "mask": np.arange(100) % 3 == 0}
    b = {**a, "w": _nudged(a["w"]), "step": np.array(2, np.int64), "extra": np.ones(5, np.float16)}
    c = {**b, "w": _nudged(b["w"], seed=2), "step": np.array(3, np.int64)}
    c["w"][:3] = 0.5  # a few rows change a lot
    paths = [tmp_path / f"{n}.lzy" for n in "abc"]
    ls.save(a, paths[0], compression="zstd")
    ls.save(b, paths[1], compression="zstd", base=paths[0])
    ls.save(c, paths[2], compression="zstd", base=paths[1])
    return paths, [a, b, c]


@pytest.mark.slow
def test_every_file_of_a_chain_reads_back_bit_identical(chain):
    paths, states = chain
    for path, state in zip(paths, states):
        _same_bytes(ls.load(path), state)
        with ls.open(path) as ck:
            _same_bytes({k: ck[k] for k in ck}, state)
            assert ck.verify() == []
            sl = ck.get_slice("w")[5:9, 100:140]
            assert sl.tobytes() == state["w"][5:9, 100:140].tobytes()
            assert ck.get_slice("w")[-1].tobytes() == state["w"][-1].tobytes()


@pytest.mark.slow
def test_versions_and_what_each_tensor_is_stored_as(chain):
    paths, _ = chain
    with ls.open(paths[0]) as ck:
        assert ck.format_version == (1, 0) and ck.base is None
    with ls.open(paths[2]) as ck:
        assert ck.format_version == (1, 3)
        assert ck.base == os.fspath(paths[1])
        assert ck.system_metadata["__lazystore_base__"]["file"] == "b.lzy"
        info = {n: ck.info(n) for n in ck}
    # "step" changed, and 8 bytes are cheaper alone than as a delta with its plane header.
    assert {n: i.compression for n, i in info.items()} == {"w": "delta", "frozen": "delta", "step": None,
                                                            "mask": "delta", "extra": "delta"}
    # Unchanged tensors cost no data bytes at all, only their chunk records.
    assert info["frozen"].stored_nbytes == 0 and info["mask"].stored_nbytes == 0
    assert 0 < info["w"].stored_nbytes < 0.8 * ls.open(paths[0]).info("w").stored_nbytes


def test_a_delta_of_an_unchanged_checkpoint_holds_no_tensor_bytes(tmp_path):
    state = {"w": _trained_like((1000, 300)), "b": np.arange(7)}
    ls.save(state, tmp_path / "a.lzy", compression="zstd")
    ls.save(state, tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy")
    with ls.open(tmp_path / "b.lzy") as ck:
        assert ck.stored_nbytes == 0
    assert os.path.getsize(tmp_path / "b.lzy") < 1024
    _same_bytes(ls.load(tmp_path / "b.lzy"), state)


@pytest.mark.slow
def test_a_tensor_that_a_delta_does_not_shrink_is_stored_alone(tmp_path):
    # Unrelated new values: the delta is no smaller than the tensor alone.
    ls.save({"w": _trained_like((512, 512), seed=1)}, tmp_path / "a.lzy", compression="zstd")
    new = {"w": _trained_like((512, 512), seed=2), "n": np.zeros(3)}
    ls.save(new, tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy")
    with ls.open(tmp_path / "b.lzy") as ck:
        # No delta tensor: an ordinary file, that needs no base.
        assert ck.info("w").compression == "zstd" and ck.base is None and ck.format_version == (1, 0)
    (tmp_path / "a.lzy").unlink()
    _same_bytes(ls.load(tmp_path / "b.lzy"), new)


def test_changed_dtype_or_shape_is_stored_alone(tmp_path):
    ls.save({"a": np.zeros((4, 4), np.float32), "b": np.zeros(8, np.float32)}, tmp_path / "a.lzy")
    new = {"a": np.zeros((4, 4), np.float64), "b": np.zeros(9, np.float32)}
    ls.save(new, tmp_path / "b.lzy", base=tmp_path / "a.lzy")
    with ls.open(tmp_path / "b.lzy") as ck:
        assert ck.base is None and {ck.info(n).compression for n in ck} == {None}


@pytest.mark.parametrize("spec", ls.DTYPES, ids=lambda d: d.name)
def test_every_dtype_round_trips_as_a_delta(tmp_path, spec):
    n = 4096 * spec.dtype.itemsize
    old = rng.integers(0, 256, n, dtype=np.uint8)
    new = old.copy()
    new[::7] = rng.integers(0, 256, len(new[::7]), dtype=np.uint8)  # some bytes of some elements change
    arrays = [{"t": b.view(spec.dtype).reshape(64, -1)} for b in (old, new)]
    ls.save(arrays[0], tmp_path / "a.lzy", compression="zstd")
    ls.save(arrays[1], tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy", chunk_bytes=1024)
    with ls.open(tmp_path / "b.lzy") as ck:
        assert ck["t"].tobytes() == new.tobytes()
        assert ck.get_slice("t")[10:12].tobytes() == arrays[1]["t"][10:12].tobytes()


def test_the_delta_takes_the_bases_chunk_grid(tmp_path):
    a = {"w": _trained_like((300, 100))}
    ls.save(a, tmp_path / "a.lzy", compression="zstd", chunk_bytes=4000)
    b = {"w": _nudged(a["w"])}
    ls.save(b, tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy")  # default chunk size
    with ls.open(tmp_path / "a.lzy") as base, ls.open(tmp_path / "b.lzy") as ck:
        assert ck.info("w").chunk_count == base.info("w").chunk_count == 30
        assert ck.info("w").compression == "delta" and ck["w"].tobytes() == b["w"].tobytes()


# -- the base: missing, replaced, damaged ------------------------------------------------


@pytest.mark.slow
def test_a_missing_base_is_an_error_naming_it(chain):
    paths, states = chain
    paths[1].rename(paths[1].with_suffix(".moved"))
    with ls.open(paths[2]) as ck:  # opening reads one index: the base is needed only for delta chunks
        with pytest.raises(ls.BaseCheckpointError, match=r"b\.lzy .*is missing") as exc:
            ck["w"]
        with pytest.raises(ls.BaseCheckpointError, match=r"b\.lzy"):
            ck.verify()
    assert isinstance(exc.value, ls.FormatError)


@pytest.mark.slow
def test_a_replaced_base_is_refused_never_misread(chain):
    paths, states = chain
    # Other tensors under the same names: a base replaced (say, by another run) under the same name.
    ls.save({**states[1], "w": _nudged(states[1]["w"], seed=9)}, paths[1], compression="zstd")
    for read in (lambda: ls.load(paths[2]), lambda: ls.open(paths[2])["w"], lambda: ls.open(paths[2]).verify(),
                 lambda: ls.open(paths[2]).get_slice("w")[7]):
        with pytest.raises(ls.BaseCheckpointError, match=r"b\.lzy .*not the content it was coded against"):
            read()
    with ls.open(paths[2]) as ck:  # what still has the content it was coded against reads
        _same_bytes({"frozen": ck["frozen"]}, {"frozen": states[2]["frozen"]})


def _reencoded(paths, states, how):
    """Write checkpoint b again with the same content, encoded another way."""
    if how == "raw":
        ls.save(states[1], paths[1])
    elif how == "zstd-level":
        ls.save(states[1], paths[1], compression="zstd", compression_level=19)
    elif how == "delta-against-another":
        # As a reverse series does: b becomes a delta against a newer file.
        newer = paths[0].with_name("n.lzy")
        ls.save({**states[1], "w": _nudged(states[1]["w"], seed=5)}, newer, compression="zstd")
        ls.save(states[1], paths[1], compression="zstd", base=newer)
        with ls.open(paths[1]) as ck:
            assert ck.base == os.fspath(newer) and ck.info("w").compression == "delta"
    else:  # a keyframe of its own, the old one gone
        ls.save(states[1], paths[1], compression="zstd")
        paths[0].unlink()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["raw", "zstd-level", "delta-against-another", "keyframe"])
def test_a_base_rewritten_with_the_same_content_keeps_its_dependents_valid(chain, how):
    paths, states = chain
    with ls.open(paths[1]) as ck:
        old_identity = ck._file.index.identity
    _reencoded(paths, states, how)
    with ls.open(paths[1]) as ck:
        assert ck._file.index.identity != old_identity  # the base's index (and bytes) changed
    _same_bytes(ls.load(paths[2]), states[2])
    with ls.open(paths[2]) as ck:
        assert ck.verify() == []
        _same_bytes({k: ck[k] for k in ck}, states[2])
        assert ck.get_slice("w")[5:9, 100:140].tobytes() == states[2]["w"][5:9, 100:140].tobytes()


def test_a_delta_is_refused_against_a_base_that_is_coded_against_it(chain):
    # b is a delta of a; writing a again as a delta of b would make a cycle
    # (a decoded through b, decoded through a): refused before writing.
    paths, states = chain
    before = paths[0].read_bytes()
    with pytest.raises(ls.InvalidInputError, match=r"a\.lzy \(directly or down its chain\)"):
        ls.save(states[0], paths[0], compression="zstd", base=paths[2])
    assert paths[0].read_bytes() == before


@pytest.mark.slow
def test_a_base_two_links_down_the_chain_is_named(chain):
    paths, _ = chain
    paths[0].unlink()
    with pytest.raises(ls.BaseCheckpointError, match=r"a\.lzy \(of delta checkpoint .*b\.lzy\) is missing"):
        ls.load(paths[2])


def _flip_stored_byte(path, name):
    with ls.open(path) as ck:
        offset = ck.info(name).offset
    with open(path, "r+b") as f:
        f.seek(offset + 40)
        byte = f.read(1)
        f.seek(offset + 40)
        f.write(bytes([byte[0] ^ 0x10]))


def test_damage_in_the_base_fails_the_deltas_that_need_it(chain):
    paths, _ = chain
    _flip_stored_byte(paths[0], "frozen")  # the keyframe, two links down
    with ls.open(paths[2]) as ck:
        assert ck.verify() == ["frozen"]
        with pytest.raises(ls.ChecksumError):
            ck["frozen"]
        assert ck["w"].shape == (256, 1024)  # w's own chain is intact


@pytest.mark.slow
def test_damage_in_the_delta_itself(chain):
    paths, _ = chain
    _flip_stored_byte(paths[2], "w")
    with ls.open(paths[2]) as ck:
        assert ck.verify() == ["w"]
        with pytest.raises(ls.ChecksumError):
            ck["w"]


# -- bad arguments ------------------------------------------------------------------------------


def test_the_base_must_be_another_file_in_the_same_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    ls.save({"a": np.zeros(3)}, tmp_path / "a.lzy")
    with pytest.raises(ls.InvalidInputError, match="same folder"):
        ls.save({"a": np.ones(3)}, tmp_path / "sub" / "b.lzy", base=tmp_path / "a.lzy")
    with pytest.raises(ls.InvalidInputError, match="its own base"):
        ls.save({"a": np.ones(3)}, tmp_path / "a.lzy", base=tmp_path / "a.lzy")
    with pytest.raises(ls.InvalidInputError, match="sharded"):
        ls.save({"a": np.ones(3)}, tmp_path / "f", base=tmp_path / "a.lzy", max_shard_size=100)
    with pytest.raises(ls.InvalidInputError, match="local"):
        ls.save({"a": np.ones(3)}, "memory://x/b.lzy", base=tmp_path / "a.lzy")
    with pytest.raises(FileNotFoundError):
        ls.save({"a": np.ones(3)}, tmp_path / "b.lzy", base=tmp_path / "nothing.lzy")
    assert sorted(os.listdir(tmp_path)) == ["a.lzy", "sub"]  # nothing left behind
    assert ls.load(tmp_path / "a.lzy")["a"].tolist() == [0, 0, 0]


def test_nested_state_and_background_saves_take_a_base(tmp_path):
    torch = pytest.importorskip("torch")
    state = {"model": {"w": torch.from_numpy(_trained_like((128, 128)))}, "step": 1}
    ls.save(state, tmp_path / "a.lzy", compression="zstd")
    state["model"]["w"] += 1e-6
    ls.save_async(state, tmp_path / "b.lzy", compression="zstd", base=tmp_path / "a.lzy").result()
    got = ls.load(tmp_path / "b.lzy")
    assert torch.equal(got["model"]["w"], state["model"]["w"]) and got["step"] == 1


# -- format rules ------------------------------------------------------------------------------


def _index_of(data: bytes) -> tuple[int, int]:
    index_offset, index_length = struct.unpack_from("<QQ", data, len(data) - 40)
    return index_offset, index_length


def _rewrite_index(src, dst, edit, minor=None):
    """Copy a file, editing its index (and fixing the index checksum) or its version."""
    from lazystore._core.checksum import digest

    data = bytearray(open(src, "rb").read())
    off, length = _index_of(data)
    index = bytearray(data[off : off + length])
    edit(index)
    data[off:-40] = index  # the trailer follows the index: its length and checksum are fixed here
    struct.pack_into("<QQ", data, len(data) - 32, len(index), digest(bytes(index)))
    if minor is not None:
        struct.pack_into("<H", data, 10, minor)
        struct.pack_into("<H", data, len(data) - 14, minor)
    open(dst, "wb").write(bytes(data))


@pytest.mark.parametrize("minor, message", [(1, "delta codec in a format 1.1"), (2, "codec 3 in a format 1.2")])
def test_a_delta_tensor_in_a_file_older_than_its_codec_is_corrupt(chain, tmp_path, minor, message):
    paths, _ = chain
    _rewrite_index(paths[2], tmp_path / "old.lzy", lambda ix: None, minor=minor)
    with ls.open(tmp_path / "old.lzy") as ck, pytest.raises(ls.FormatError, match=message) as exc:
        ck["w"]
    assert not isinstance(exc.value, ls.UnsupportedVersionError)


def test_codec_3_needs_the_base_checksums_in_its_chunk_records(chain, tmp_path):
    paths, _ = chain

    def narrow(ix):  # 24-byte chunk records cut to the 16 bytes of format 1.0
        esize, csize, tensors, ndims, nchunks = struct.unpack_from("<IIQQQ", ix)
        assert csize == 24
        at = 64 + tensors * esize + ndims * 8
        records = bytes(ix[at : at + nchunks * csize])
        ix[at : at + nchunks * csize] = b"".join(records[j : j + 16] for j in range(0, len(records), 24))
        struct.pack_into("<I", ix, 4, 16)

    _rewrite_index(paths[2], tmp_path / "c.lzy", narrow)
    with ls.open(tmp_path / "c.lzy") as ck, pytest.raises(ls.FormatError, match="without base checksums"):
        ck["w"]


def test_delta_tensors_without_a_base_member_are_refused(chain, tmp_path):
    paths, _ = chain

    def drop_base(ix):
        at = bytes(ix).index(b'"__lazystore_base__"')
        ix[at + 3 : at + 7] = b"XXXX"  # renamed: an unknown reserved member

    _rewrite_index(paths[2], tmp_path / "c.lzy", drop_base)
    with pytest.raises(ls.FormatError, match="no __lazystore_base__"):
        ls.open(tmp_path / "c.lzy")


@pytest.mark.parametrize("bad", ['"../b.lzy"', '"sub/b.lzy"', '""', "7"])
def test_a_base_name_that_leaves_the_folder_is_corrupt(chain, tmp_path, bad):
    paths, _ = chain

    def rename(ix):
        text = bytes(ix)
        at = text.index(b'"file":"b.lzy"')
        new = text[:at] + b'"file":' + bad.encode() + text[at + len(b'"file":"b.lzy"'):]
        ix[:] = new
        struct.pack_into("<Q", ix, 40, struct.unpack_from("<Q", ix, 40)[0] + len(new) - len(text))

    def fixed_trailer(src, dst):
        from lazystore._core.checksum import digest

        data = bytearray(open(src, "rb").read())
        off, length = _index_of(data)
        index = bytearray(data[off : off + length])
        rename(index)
        out = bytes(data[:off]) + bytes(index) + struct.pack("<QQQHHI8s", off, len(index), digest(bytes(index)), 1, 2,
                                                              0, fmt.MAGIC)
        open(dst, "wb").write(out)

    fixed_trailer(paths[2], tmp_path / "c.lzy")
    with pytest.raises(ls.FormatError, match="__lazystore_base__"):
        ls.open(tmp_path / "c.lzy")


def test_a_1_2_reader_refuses_a_1_3_file_as_a_newer_version(chain, monkeypatch):
    paths, _ = chain
    # Play lazystore as it was before format 1.3: it knew codecs 0, 1 and 2 only.
    monkeypatch.setattr(fmt, "FORMAT_MINOR", 2)
    monkeypatch.delitem(CODECS_BY_ID, 3)
    with ls.open(paths[2]) as ck, pytest.raises(ls.UnsupportedVersionError, match=r"codec 3.*format 1\.3.*upgrade"):
        ck["w"]


def test_a_1_1_reader_refuses_a_1_2_file_as_a_newer_version(monkeypatch):
    # Play lazystore as it was before format 1.2: it knew codecs 0 and 1 only.
    monkeypatch.setattr(fmt, "FORMAT_MINOR", 1)
    monkeypatch.delitem(CODECS_BY_ID, 2)
    monkeypatch.delitem(CODECS_BY_ID, 3)
    with ls.open(DATA / "golden_v1_2.lzy") as ck, \
            pytest.raises(ls.UnsupportedVersionError, match=r"codec 2.*format 1\.2.*upgrade"):
        ck["w"]


# -- the command line --------------------------------------------------------------------------


def test_the_command_line_reads_delta_files(chain, capsys):
    paths, _ = chain
    code, out, _ = run(capsys, "verify", paths[2])
    assert code == 0, out
    code, out, _ = run(capsys, "info", paths[2])
    assert code == 0 and "delta" in out
    code, out, _ = run(capsys, "ls", paths[2])
    assert code == 0 and "frozen" in out
    paths[1].unlink()
    code, out, err = run(capsys, "verify", paths[2])
    assert code != 0 and "b.lzy" in out + err


# -- what a base can be ------------------------------------------------------------------------


def test_a_link_to_the_target_is_not_a_base(tmp_path):
    ls.save({"a": np.zeros(3)}, tmp_path / "t.lzy")
    os.symlink("t.lzy", tmp_path / "link.lzy")
    with pytest.raises(ls.InvalidInputError, match="its own base"):
        ls.save({"a": np.ones(3)}, tmp_path / "t.lzy", base=tmp_path / "link.lzy")
    assert ls.load(tmp_path / "t.lzy")["a"].tolist() == [0, 0, 0]  # the old checkpoint is kept
    assert sorted(os.listdir(tmp_path)) == ["link.lzy", "t.lzy"]


def test_a_delta_saved_through_a_link_names_a_base_beside_the_file_it_lands_in(tmp_path):
    # A save through a symlink writes the file the link names (sinks/targets):
    # the base must be beside that file, where a reader of it looks.
    real, links = tmp_path / "real", tmp_path / "links"
    real.mkdir()
    links.mkdir()
    ls.save({"a": np.zeros(1000, np.float32)}, real / "base.lzy")
    ls.save({"a": np.zeros(1000, np.float32)}, links / "base.lzy")
    os.symlink(real / "step.lzy", links / "step.lzy")
    new = np.arange(1000, dtype=np.float32)
    with pytest.raises(ls.InvalidInputError, match="same folder"):
        ls.save({"a": new}, links / "step.lzy", base=links / "base.lzy")
    assert not (real / "step.lzy").exists() and os.path.islink(links / "step.lzy")
    ls.save({"a": new}, links / "step.lzy", base=real / "base.lzy")
    for path in (real / "step.lzy", links / "step.lzy"):  # by its own name and through the link
        assert ls.load(path)["a"].tolist() == new.tolist()


def test_a_base_a_reader_would_refuse_is_refused_before_writing(tmp_path):
    (tmp_path / "out").mkdir()
    ls.save({"a": np.zeros(3)}, tmp_path / "out" / "a.lzy")
    os.symlink(tmp_path / "out" / "a.lzy", tmp_path / "link.lzy")  # a link out of the folder
    os.mkfifo(tmp_path / "fifo.lzy")
    with pytest.raises(ls.FormatError, match="link out of the folder"):
        ls.save({"a": np.ones(3)}, tmp_path / "b.lzy", base=tmp_path / "link.lzy")
    with pytest.raises(ls.FormatError, match="not a regular file"):  # never a hang
        ls.save({"a": np.ones(3)}, tmp_path / "b.lzy", base=tmp_path / "fifo.lzy")
    assert sorted(os.listdir(tmp_path)) == ["fifo.lzy", "link.lzy", "out"]


@pytest.mark.slow
def test_a_base_already_at_the_chain_limit_is_refused_before_writing(tmp_path):
    from lazystore._native.base_ref import MAX_CHAIN

    a = {"w": _trained_like((8, 64))}
    paths = [tmp_path / f"s{k:02d}.lzy" for k in range(MAX_CHAIN + 2)]
    ls.save(a, paths[0], compression="zstd")
    for k in range(1, MAX_CHAIN + 1):
        a = {"w": _nudged(a["w"], seed=k)}
        ls.save(a, paths[k], compression="zstd", base=paths[k - 1])
    with ls.open(paths[MAX_CHAIN]) as ck:  # the longest chain: it reads back
        assert ck["w"].tobytes() == a["w"].tobytes() and ck.info("w").compression == "delta"
    with pytest.raises(ls.InvalidInputError, match=rf"s{MAX_CHAIN}\.lzy already has {MAX_CHAIN} bases"):
        ls.save(a, paths[-1], compression="zstd", base=paths[MAX_CHAIN])
    assert not paths[-1].exists() and len(os.listdir(tmp_path)) == MAX_CHAIN + 1
    ls.save(a, paths[-1], compression="zstd", base=paths[MAX_CHAIN - 1])  # one link shorter: fine


def test_a_damaged_raw_base_fails_the_save_not_the_later_read(tmp_path):
    a = {"w": _trained_like((64, 256))}
    ls.save(a, tmp_path / "a.lzy")  # raw
    with ls.open(tmp_path / "a.lzy") as ck:
        offset = ck.info("w").offset
    with open(tmp_path / "a.lzy", "r+b") as f:
        f.seek(offset + 5)
        f.write(b"\x7f")
    with pytest.raises(ls.ChecksumError, match=r"a\.lzy"):
        ls.save({"w": _nudged(a["w"])}, tmp_path / "b.lzy", base=tmp_path / "a.lzy")
    assert not (tmp_path / "b.lzy").exists()
