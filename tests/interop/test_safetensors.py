"""safetensors: lazy zero-copy reading, validation (the malformed corpus in
tests/data/safetensors/), writing files the real library loads, and the
real all-MiniLM-L6-v2 weights converted both ways bit-exactly."""

from __future__ import annotations

import io
import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy as stnp
from safetensors import safe_open

import lazystore as ls
import lazystore.numpy
from lazystore import interop
from lazystore._core.dtypes import BY_SAFETENSORS
from lazystore.interop import convert
from lazystore.interop import safetensors as st
from tests.paths import DATA

CORPUS = DATA / "safetensors"


def all_dtypes():
    rng = np.random.default_rng(0)
    out = {}
    for name, spec in BY_SAFETENSORS.items():
        if spec.packed > 1:  # safetensors.numpy has no FP4 arrays: tests/torch/test_dtypes.py covers F4
            continue
        dt = spec.dtype
        raw = rng.integers(0, 256, size=15 * dt.itemsize, dtype=np.uint8)
        arr = raw.view(dt).reshape(3, 5)
        if name == "BOOL":
            arr = (raw[:15] & 1).astype(bool).reshape(3, 5)
        out[name.lower()] = arr
    out["scalar"] = np.array(2.5, np.float64)
    out["empty"] = np.zeros((0, 4), np.float32)
    return out


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def st_file(tmp_path):
    path = tmp_path / "ref.safetensors"
    stnp.save_file(all_dtypes(), str(path), metadata={"format": "np", "note": "hi"})
    return path


def test_reads_every_dtype_lazily_and_zero_copy(st_file):
    ref = all_dtypes()
    with ls.open(st_file) as ck:
        assert ck.format == "safetensors" and set(ck) == set(ref)
        assert ck.metadata == {"format": "np", "note": "hi"}
        for name, arr in ref.items():
            got = ck[name]
            assert same(got, arr), name
            if arr.nbytes:
                assert not got.flags.writeable and not got.flags.owndata  # a view of the mapping
            info = ck.info(name)
            assert info.compression is None and info.nbytes == arr.nbytes == info.stored_nbytes
        assert same(ck.get_slice("f32")[1:, 2:4], ref["f32"][1:, 2:4])
        loaded = ck.load()
        assert all(same(loaded[n], ref[n]) for n in ref)
        assert loaded["f32"].flags.writeable
        assert set(ck.select("f*")) == {n for n in ref if n.startswith("f")}


def test_misaligned_offsets_still_give_views(tmp_path):
    # Hand-written: a 1-byte tensor first, so the float32 starts at an odd offset.
    header = {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "b": {"dtype": "F32", "shape": [4], "data_offsets": [1, 17]}}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    b = np.arange(4, dtype=np.float32)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"\x07" + b.tobytes())
    with ls.open(path) as ck:
        assert ck.info("b").offset % 4 == 1
        assert same(ck["b"], b) and same(ck.get_slice("b")[2:], b[2:]) and ck["a"][0] == 7


def test_plain_safetensors_cannot_be_verified(st_file):
    with ls.open(st_file) as ck:
        with pytest.raises(ls.VerificationUnavailableError, match="no lazystore checksums"):
            ck.verify()
        assert same(ck["f32"], all_dtypes()["f32"])  # reads work, with nothing to check


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("how", ["path", "file object"])
def test_verify_on_access_of_plain_safetensors_is_refused_as_verify_is(st_file, how):
    # verify=True asks for every raw read to be checked: a file that records
    # no checksums cannot give that, so it is refused as verify() refuses,
    # naming the file, rather than read with nothing checked.
    with ls.open(st_file) as ck, pytest.raises(ls.VerificationUnavailableError) as by_verify:
        ck.verify()
    fds = _open_fds()
    opening = {"path": lambda: ls.open(st_file, verify=True),
               "file object": lambda: ls.open(io.BytesIO(st_file.read_bytes()), verify=True)}[how]
    with pytest.raises(ls.VerificationUnavailableError) as on_open:
        opening()
    assert "no lazystore checksums" in str(on_open.value) and "without verify=True" in str(on_open.value)
    if how == "path":  # verify()'s own message, and how to read the file anyway
        assert str(on_open.value).startswith(str(by_verify.value))
    assert _open_fds() == fds  # the refused file is closed


def test_reading_plain_safetensors_by_default_still_checks_what_it_can(st_file):
    # load's verify=True is its default, "check what the file records":
    # a file that records nothing loads, as documented, unchecked.
    ref = all_dtypes()
    assert all(same(a, ref[n]) for n, a in ls.load(st_file).items())
    assert all(same(a, ref[n]) for n, a in ls.load(st_file, verify=True).items())
    assert all(same(a, ref[n]) for n, a in lazystore.numpy.load(st_file.read_bytes(), verify=True).items())
    with ls.open(st_file) as ck:
        assert set(ck.load(verify=True)) == set(ref)


def test_open_verified_checks_what_a_file_records_and_opens_the_rest(tmp_path, st_file):
    w = np.arange(64, dtype=np.float32)
    signed = tmp_path / "signed.safetensors"
    ls.save({"w": w}, signed)
    with ls.open(signed) as ck:
        off = ck.info("w").offset
    data = bytearray(signed.read_bytes())
    data[off] ^= 0x40
    signed.write_bytes(bytes(data))
    with interop.open_verified(signed) as ck, pytest.raises(ls.ChecksumError):
        ck["w"]  # verified on access: the flipped byte is caught
    with interop.open_verified(st_file, mmap=False) as ck:  # nothing recorded: opened as it is
        assert same(ck["f32"], all_dtypes()["f32"])


def test_verify_on_access_of_lazystore_written_safetensors_checks(tmp_path):
    path = tmp_path / "signed.safetensors"
    ls.save({"w": np.arange(6, dtype=np.float32)}, path)
    with ls.open(path, verify=True) as ck:
        assert ck.verify() == [] and same(ck["w"], np.arange(6, dtype=np.float32))


def test_sniffing_is_by_content_not_extension(tmp_path, st_file):
    disguised = tmp_path / "model.lzy"
    disguised.write_bytes(st_file.read_bytes())
    with ls.open(disguised) as ck:
        assert ck.format == "safetensors"
    lzy = tmp_path / "really_lazystore.safetensors"
    ls.save({"x": np.ones(3)}, tmp_path / "x.lzy")
    (tmp_path / "x.lzy").rename(lzy)  # ls.save itself writes safetensors under this name (issue #25)
    with ls.open(lzy) as ck:
        assert ck.format == "lazystore"
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not a checkpoint")
    with pytest.raises(ls.FormatError, match="not a lazystore or safetensors file"):
        ls.open(junk)


CORPUS_FILES = sorted(CORPUS.glob("*.safetensors"))


def test_corpus_has_one_file_per_validation():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mk", CORPUS.parent / "make_malformed_safetensors.py")
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    assert {p.stem for p in CORPUS_FILES} == set(mk.CASES)
    for name, content in mk.CASES.items():  # the committed files are what the script writes
        assert (CORPUS / f"{name}.safetensors").read_bytes() == content, name


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_malformed_corpus_gives_format_error(path):
    with pytest.raises(ls.FormatError):
        ls.open(path)
    with pytest.raises(ls.FormatError):
        ls.load(path)
    if not path.stem.startswith("lazystore_"):  # the real library refuses them too
        with pytest.raises(Exception):  # noqa: B017 - the real library raises its own types
            stnp.load_file(str(path))


def test_a_header_over_the_json_bounds_is_refused_both_ways(tmp_path, monkeypatch):
    # The bounds of every JSON lazystore parses (docs/format.md §11.6), shrunk.
    from lazystore._core import strict_json

    path = tmp_path / "many.safetensors"
    stnp.save_file({f"t{i}": np.zeros(1, np.float32) for i in range(100)}, str(path))
    monkeypatch.setattr(strict_json, "MAX_VALUES", 500)  # each entry: ~11 values
    with pytest.raises(ls.FormatError, match="header too large to read.*JSON values"):
        ls.open(path)
    with pytest.raises(ls.InvalidInputError, match="header too large.*JSON values"):
        with st.SafetensorsWriter(tmp_path / "out.safetensors") as w:
            for i in range(100):
                w.add(f"t{i}", np.zeros(1, np.float32))
    assert not (tmp_path / "out.safetensors").exists()


def test_written_float8_loads_in_safetensors_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    ref = {k: v for k, v in all_dtypes().items() if k.startswith("f8")}
    ls.save(ref, tmp_path / "f8.lzy")
    convert.to_safetensors(tmp_path / "f8.lzy", tmp_path / "f8.safetensors")
    got = load_file(str(tmp_path / "f8.safetensors"))
    assert got["f8_e4m3"].dtype == torch.float8_e4m3fn and got["f8_e5m2"].dtype == torch.float8_e5m2
    for k in ref:
        assert got[k].view(torch.uint8).numpy().tobytes() == ref[k].tobytes()


def test_written_file_loads_in_safetensors(tmp_path):
    # safetensors' numpy loader has no float8 (numpy lacks it): see the test above.
    ref = {k: v for k, v in all_dtypes().items() if not k.startswith("f8")}
    lzy = tmp_path / "m.lzy"
    ls.save(ref, lzy, compression="zstd", metadata={"step": 7, "name": "m", "cfg": {"a": [1, 2]}})
    out = tmp_path / "m.safetensors"
    convert.to_safetensors(lzy, out)
    got = stnp.load_file(str(out))  # safetensors' numpy loader
    assert set(got) == set(ref) and all(same(got[n], ref[n]) for n in ref)
    with safe_open(str(out), framework="np") as f:
        meta = f.metadata()
        assert meta["name"] == "m" and json.loads(meta["lazystore.metadata"]) == {"step": 7, "cfg": {"a": [1, 2]}}
        assert set(json.loads(meta["lazystore.checksums"])) == set(ref)
        assert same(f.get_slice("f32")[1:2], ref["f32"][1:2])
    with ls.open(out) as ck:  # our checksums make it verifiable, and metadata round-trips
        assert ck.metadata == {"step": 7, "name": "m", "cfg": {"a": [1, 2]}}
        assert ck.verify() == []
    # Damage one tensor's bytes: verify names it, verify=True reads refuse it.
    with ls.open(out) as ck:
        off = ck.info("f32").offset
    data = bytearray(out.read_bytes())
    data[off] ^= 0xFF
    out.write_bytes(bytes(data))
    with ls.open(out) as ck:
        assert ck.verify() == ["f32"]
    with ls.open(out, verify=True) as ck, pytest.raises(ls.ChecksumError):
        ck["f32"]


@pytest.mark.slow
def test_nested_state_survives_a_safetensors_round_trip(tmp_path):
    state = {"model": {"w": np.ones((2, 3), np.float32)}, "opt": [np.arange(4)], "epoch": 3}
    ls.save(state, tmp_path / "s.lzy")
    convert.to_safetensors(tmp_path / "s.lzy", tmp_path / "s.safetensors")
    back = ls.load(tmp_path / "s.safetensors")
    assert back["epoch"] == 3 and same(back["model"]["w"], state["model"]["w"])
    assert isinstance(back["opt"], list) and same(back["opt"][0], state["opt"][0])


def test_writer_refuses_what_safetensors_cannot_hold(tmp_path):
    with pytest.raises(ls.UnsupportedDtypeError):
        with st.SafetensorsWriter(tmp_path / "c.safetensors") as w:
            w.add("c", np.zeros(2, np.complex128))
    with pytest.raises(ls.InvalidInputError):
        with st.SafetensorsWriter(tmp_path / "c.safetensors") as w:
            w.add("__metadata__", np.zeros(2))
    assert list(tmp_path.iterdir()) == []  # nothing left behind


@pytest.mark.slow
def test_minilm_both_ways_bit_exact(tmp_path, minilm):
    src = minilm
    ref = stnp.load_file(str(src))
    with safe_open(str(src), framework="np") as f:
        ref_meta = f.metadata() or {}
    lzy = tmp_path / "minilm.lzy"
    convert.from_safetensors(src, lzy, compression="zstd")
    with ls.open(lzy) as ck:
        assert ck.verify() == []
        assert set(ck) == set(ref) and all(same(ck[n], ref[n]) for n in ref)
        assert ck.metadata == ref_meta
    back = tmp_path / "minilm.safetensors"
    convert.to_safetensors(lzy, back)
    got = stnp.load_file(str(back))
    assert set(got) == set(ref) and all(same(got[n], ref[n]) for n in ref)
    with ls.open(src) as a, ls.open(back) as b:
        assert list(a) == list(b)  # same file order
        assert all(a[n].tobytes() == b[n].tobytes() for n in a)
    with ls.open(back) as ck:
        assert ck.verify() == []
