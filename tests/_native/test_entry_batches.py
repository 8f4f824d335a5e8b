"""One set of entry rules, whether an entry is checked alone or in a batch.

A reader checks an entry's rules on first use (docs/format.md §13.1 step
5): alone, in Python integers, when a name is looked up by itself (opening a
file to read one tensor), and in numpy batches when the names are listed
(reading tensor after tensor, loading everything). Both run the same rule
code (lazystore/_native/entry_rules.py); these tests hold them to the same
verdict, and the same message, for every entry of every hostile file.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import lazystore as ls
from tests.hypothesis_profiles import examples
from tests.properties.test_hostile import INDEX_CASES, Parts, base_tensors

U64_MAX = 2**64 - 1


def _verdict(read):
    try:
        info = read()
    except ls.LazyStoreError as exc:
        return type(exc).__name__, str(exc)
    return "ok", info


def verdicts_alone(path, names) -> dict:
    """Each name read from a fresh view: looked up by search, its entry checked alone."""
    out = {}
    for name in names:
        with ls.open(path) as ck:
            out[name] = _verdict(lambda ck=ck, name=name: ck.info(name))
            assert not ck._file.index.keys.listed, "the entry was meant to be checked alone"
    return out


def verdicts_in_batches(path, names) -> dict:
    """Every name read from one view whose names are listed: entries checked in batches."""
    with ls.open(path) as ck:
        assert list(ck) == names
        return {name: _verdict(lambda name=name: ck.info(name)) for name in names}


def assert_same_verdicts(path, names) -> dict:
    alone, batched = verdicts_alone(path, names), verdicts_in_batches(path, names)
    assert alone == batched
    with ls.open(path) as ck:  # a full load checks every entry in one batch
        refused = [v for v in alone.values() if v[0] != "ok"]
        if refused:
            with pytest.raises(ls.LazyStoreError) as err:
                ck.load()
            assert (type(err.value).__name__, str(err.value)) == refused[0]
        else:
            try:
                ck.load()
            except ls.FormatError as exc:
                # Every entry is legal, but a chunk's bytes may not be what its
                # (changed) codec reads: the decode's error, naming the chunk.
                assert re.match(r"tensor '[^']+' chunk \d+: ", str(exc)), exc
    return alone


@pytest.fixture(scope="module")
def base_blob(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("base") / "base.lzy"
    with ls.Writer(path, chunk_bytes=512, metadata={"step": 1}) as w:
        for name, arr, compression in base_tensors():
            w.add(name, arr, compression=compression)
    return path.read_bytes()


def _opens_and_lists(path) -> bool:
    try:
        with ls.open(path) as ck:
            list(ck)
    except ls.FormatError:
        return False  # a file rule (or K3), refused as a whole
    return True


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_alone_and_batched_agree_on_every_hostile_case(base_blob, tmp_path, case):
    parts = Parts.parse(base_blob)
    INDEX_CASES[case](parts)
    path = tmp_path / "hostile.lzy"
    path.write_bytes(parts.build())
    if not _opens_and_lists(path):
        return
    found = assert_same_verdicts(path, ["a", "m", "i", "z"])
    assert any(v[0] != "ok" for v in found.values()), f"{case}: every entry passed"


def test_alone_and_batched_agree_on_an_intact_file(base_blob, tmp_path):
    path = tmp_path / "base.lzy"
    path.write_bytes(base_blob)
    found = assert_same_verdicts(path, ["a", "m", "i", "z"])
    assert all(v[0] == "ok" for v in found.values())


def test_an_entry_of_many_chunks_checked_alone(tmp_path):
    # More chunks than one entry is checked in Python integers for: the
    # entry alone goes through the numpy batch code, and still agrees.
    path = tmp_path / "many.lzy"
    with ls.Writer(path, chunk_bytes=64) as w:
        w.add("small", np.arange(4, dtype=np.float32))
        w.add("big", np.arange(200 * 16, dtype=np.float32).reshape(200, 16))  # 200 chunks
        w.add("tail", np.ones(3, dtype=np.int8))
    parts = Parts.parse(path.read_bytes())
    assert int(parts.entries["chunk_count"][1]) == 200
    parts.chunks["stored_nbytes"][1 + 150] = 65  # a raw chunk that is not its decoded length
    parts.entries["stored_nbytes"][1] += 1
    path.write_bytes(parts.build())
    found = assert_same_verdicts(path, ["small", "big", "tail"])
    assert found["small"][0] == "ok" and found["tail"][0] != "ok"  # tail now starts in the wrong place
    assert found["big"] == ("FormatError",
                            "corrupt index: tensor 'big': raw chunk length differs from its decoded length")


# -- property: any lie in any entry gets one verdict --------------------------------------------

FIELDS = ("data_offset", "stored_nbytes", "nbytes", "chunk_extent", "dtype", "codec", "chunk_axis", "planes")
VALUES = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 8, 16, 63, 64, 65, 255, 4096, 2**31, 2**62, 2**63, U64_MAX]),
                   st.integers(0, U64_MAX))
LIMITS = {"dtype": 255, "codec": 255, "chunk_axis": 255, "planes": 255}


@pytest.fixture(scope="module")
def many_blob(tmp_path_factory) -> tuple[bytes, list[str]]:
    rng = np.random.default_rng(5)
    path = tmp_path_factory.mktemp("many") / "many.lzy"
    names = []
    with ls.Writer(path, chunk_bytes=256) as w:
        for i in range(24):
            shape = [(), (0,), (3,), (5, 7), (40, 8), (2, 0, 3)][i % 6]
            arr = rng.standard_normal(shape).astype([np.float32, np.float16, np.int8][i % 3])
            name = f"t{i:02d}"
            w.add(name, arr, compression="zstd" if i % 4 == 1 else None)
            names.append(name)
    return path.read_bytes(), names


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lies=st.lists(st.tuples(st.integers(0, 23), st.sampled_from(FIELDS + ("chunk",)), VALUES, st.integers(0, 10**6)),
                     min_size=1, max_size=4))
@example(lies=[(0, "codec", 1, 0)])  # a raw float32 scalar called zstd: legal entry, undecodable chunk
def test_alone_and_batched_agree_on_random_lies(many_blob, tmp_path, lies):
    blob, names = many_blob
    parts = Parts.parse(blob)
    for pos, field, value, pick in lies:
        if field == "chunk":
            if len(parts.chunks):
                parts.chunks["stored_nbytes"][pick % len(parts.chunks)] = value
        else:
            parts.entries[field][pos] = value % (LIMITS.get(field, U64_MAX) + 1)
    path = tmp_path / "lies.lzy"
    path.write_bytes(parts.build())
    if _opens_and_lists(path):
        assert_same_verdicts(path, names)


def test_chunk_sums_that_wrap_around_uint64_are_refused_both_ways():
    # Five chunks of 2**62 - 1 bytes each, every one within a (claimed)
    # 8 EiB file: their sum, 5 * 2**62 - 5, wraps around to 2**62 - 5 in
    # uint64, which is what the entry claims. Only an exact sum sees it.
    from lazystore._native import entry_batch, layout
    from lazystore._native.index import Index

    entries = np.zeros(1, layout.ENTRY_DTYPE)
    entries[0] = (0, 2**62 - 5, 5, 5, 1, 2, 1, 2, 0, 1, (0, 0, 0))  # int8 (5, 1), zstd, 5 chunks of one row
    chunks = np.zeros(5, layout.CHUNK_DTYPE)
    chunks["stored_nbytes"] = 2**62 - 1
    raw = layout.RawIndex(entries, np.array([5, 1], np.uint64), chunks, b"", b"", alignment=1)
    index = Index.foreign(raw, ["w"], {}, 2**63 - 2, kind="safetensors", checksums_known=False)
    expected = "corrupt index: tensor 'w': stored size differs from the sum of its chunks"
    with pytest.raises(ls.FormatError) as batched:
        index.entries_of([0])
    assert str(batched.value) == expected
    alone = entry_batch.check_one(index._layout, 0, *index._fetch(0), {})
    assert alone.refused == {0: "stored size differs from the sum of its chunks"}


def test_a_duplicated_name_leaves_the_other_names_loadable(base_blob, tmp_path):
    # Rule K3 may be checked per key: a name held once loads, even by a
    # full-file view, while the duplicated one is refused.
    parts = Parts.parse(base_blob)
    parts.keys = b"a\0m\0a\0z\0"
    path = tmp_path / "dup.lzy"
    path.write_bytes(parts.build())
    with ls.open(path) as ck:
        assert ck.load(["m", "z"])["m"].shape == (40, 8)
        with pytest.raises(ls.FormatError, match="duplicate key 'a'"):
            ck.load(["a"])
