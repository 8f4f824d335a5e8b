"""Fuzzing every reader: only LazyStoreError escapes, memory stays bounded.

One harness, :func:`exercise`, does everything a user can do with a
checkpoint path: open it, list its keys and metadata, ``info`` and read
every tensor (``ck[name]``, ``get_slice`` of its first rows and its last
row), ``load`` it, ``verify`` it, reopen it with ``verify=True`` and read
it again, and ``ls.load`` it (which also parses a nested-state tree). It
runs under tracemalloc and fails if any exception other than an
``ls.LazyStoreError`` subclass escapes, or if the peak of traced memory
(numpy reports its buffers to tracemalloc) passes ``PEAK_LIMIT``: the
inputs are a few KiB, so anything near that limit would be an allocation
sized by what a file *claims*.

Hypothesis drives it with byte-level mutations (bit flips, set bytes,
insert / delete / overwrite runs, interesting integers written over
fields, truncation, splices of the file's own bytes) of seed files:

- a lazystore file with raw and zstd tensors and a nested-state tree, and
  one of format 1.4 with chunk digests (56-byte records); mutations
  anywhere, and mutations confined to the index with the index
  checksum recomputed afterwards, so they get past the checksum to the
  validation of what the index says;
- a plain safetensors file, and one written by lazystore (with checksums);
- a sharded folder: a shard's bytes, and separately its JSON index, edited
  at the JSON level (wrong types, missing keys, unknown / escaping / absurd
  shard names, duplicate tensors, duplicate keys) and at the byte level;
  a Hugging Face folder of safetensors shards too;
- the nested-state tree (``__lazystore_tree__``), edited at the JSON level
  and written into an otherwise valid file, then ``ls.load``-ed;
- the chunk-digest declaration (``__lazystore_digest__``, format 1.4),
  edited at the JSON level in the index of a file with digests.

Run sizes: ``LAZYSTORE_FUZZ_EXAMPLES`` examples per target (default 150,
the CI run, well under a minute); docs/reliability.md records the long
runs. Each run's seed is printed (``-s`` shows it, or see the test's
``fuzz seed`` property); ``LAZYSTORE_FUZZ_SEED=<n>`` replays a run. With
``LAZYSTORE_FUZZ_CRASH_DIR=<dir>`` every escaping input is copied there,
ready to become a regression file under ``tests/data/fuzz_regressions/``,
whose files are replayed by :func:`test_fuzz_regressions` on every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stnp
import xxhash
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore._native.layout import TRAILER
from lazystore.interop import sharded
from lazystore.views import tree
from tests.hypothesis_profiles import examples
from tests.paths import DATA

EXAMPLES = int(os.environ.get("LAZYSTORE_FUZZ_EXAMPLES") or examples(150))
SEED = int(os.environ.get("LAZYSTORE_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
CRASH_DIR = os.environ.get("LAZYSTORE_FUZZ_CRASH_DIR")
PEAK_LIMIT = 64 << 20
REGRESSIONS = DATA / "fuzz_regressions"

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=False,
    database=None,  # no .hypothesis/ examples database: each run explores afresh
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True, scope="module")
def _report_seed():
    print(f"\nfuzz seed: LAZYSTORE_FUZZ_SEED={SEED} ({EXAMPLES} examples per target)")
    yield


# --- the harness -----------------------------------------------------------------------


class Escaped(AssertionError):
    pass


def _touch_everything(path) -> None:
    with ls.open(path) as ck:
        ck.metadata
        ck.system_metadata
        names = list(ck)
        len(ck)
        for name in names:
            assert name in ck
            info = ck.info(name)
            ck[name]
            s = ck.get_slice(name)
            if s.shape:
                s[:2]
                s[-1] if s.shape[0] else s[:0]
            else:
                s[...]
            info.nbytes, info.stored_nbytes
        ck.load()
        try:
            ck.verify()
            verifiable = True
        except ls.VerificationUnavailableError:
            verifiable = False  # a safetensors file without lazystore checksums: nothing to verify against
    if verifiable:
        with ls.open(path, verify=True) as ck:
            for name in ck:
                ck[name]
    else:  # verify-on-access is refused as verify() is
        with pytest.raises(ls.VerificationUnavailableError):
            ls.open(path, verify=True)
    ls.load(path)


def exercise(path, *, keep_as: str | None = None) -> None:
    """Everything a reader does with ``path``; only LazyStoreError may escape,
    and traced memory stays under PEAK_LIMIT. ``keep_as`` names the reader
    (a subfolder of the crash dir) for inputs that fail."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    escaped = None
    try:
        _touch_everything(path)
    except ls.LazyStoreError:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of the test
        escaped = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    problem = None
    if escaped is not None:
        problem = f"{type(escaped).__name__} escaped: {escaped!r}"[:2000]
    elif peak >= PEAK_LIMIT:
        problem = f"traced memory peaked at {peak} bytes (limit {PEAK_LIMIT})"
    if problem:
        if CRASH_DIR and keep_as:
            _keep(path, keep_as)
        raise Escaped(problem) from escaped


def _keep(path, reader: str) -> None:
    path = Path(path)
    if path.is_dir():
        h = hashlib.sha1(b"".join(p.name.encode() + p.read_bytes() for p in sorted(path.iterdir())
                                  if p.is_file())).hexdigest()[:12]
        dest = Path(CRASH_DIR) / reader / h
        if not dest.exists():
            shutil.copytree(path, dest)
    else:
        data = path.read_bytes()
        dest = Path(CRASH_DIR) / reader / (hashlib.sha1(data).hexdigest()[:12] + path.suffix)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def fresh(path: Path) -> Path:
    """Remove what a previous example left at ``path`` (never rewrite a file
    in place: a view of the last example may still map it)."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    return path


# --- byte mutations -----------------------------------------------------------------------

INTERESTING = [0, 1, 2, 7, 8, 15, 16, 63, 64, 255, 256, 2**15, 2**16 - 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
               2**40, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]

position = st.integers(0, 2**32)
mutation = st.one_of(
    st.tuples(st.just("flip"), position, st.integers(0, 7)),
    st.tuples(st.just("set"), position, st.integers(0, 255)),
    st.tuples(st.just("insert"), position, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), position, st.integers(1, 64)),
    st.tuples(st.just("overwrite"), position, st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("int"), position, st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from(INTERESTING))),
    st.tuples(st.just("splice"), position, st.tuples(position, st.integers(1, 128))),
    st.tuples(st.just("truncate"), position, st.none()),
)
mutations = st.lists(mutation, min_size=1, max_size=6)


def mutate(blob: bytes, muts, lo: int = 0, hi: int | None = None) -> bytes:
    """Apply ``muts`` to ``blob``, at positions in ``[lo, hi)`` (hi: the end)."""
    buf = bytearray(blob)
    for kind, where, arg in muts:
        end = len(buf) if hi is None else min(hi, len(buf))
        if end <= lo:
            break
        at = lo + where % (end - lo)
        if kind == "flip":
            buf[at] ^= 1 << arg
        elif kind == "set":
            buf[at] = arg
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "delete":
            del buf[at : at + arg]
        elif kind == "overwrite":
            buf[at : at + len(arg)] = arg
        elif kind == "int":
            width, value = arg
            buf[at : at + width] = (value % 2 ** (8 * width)).to_bytes(width, "little")
        elif kind == "splice":
            src, n = arg
            src %= len(buf)
            buf[at:at] = buf[src : src + n]
        elif kind == "truncate":
            del buf[at:]
    return bytes(buf)


def index_bounds(blob: bytes) -> tuple[int, int]:
    offset, length = TRAILER.unpack_from(blob, len(blob) - TRAILER.size)[:2]
    return offset, offset + length


def refix_index_checksum(blob: bytes, delta: int) -> bytes:
    """After a mutation of the index that changed its length by ``delta``,
    rewrite the trailer's index length and checksum so they match again."""
    buf = bytearray(blob)
    t = list(TRAILER.unpack_from(buf, len(buf) - TRAILER.size))
    t[1] += delta
    if not 0 <= t[1] <= len(buf) - TRAILER.size - t[0]:
        return blob
    t[2] = xxhash.xxh3_64_intdigest(bytes(buf[t[0] : t[0] + t[1]]))
    buf[-TRAILER.size :] = TRAILER.pack(*t)
    return bytes(buf)


# --- seeds ------------------------------------------------------------------------------------


def _state():
    return {
        "model": {"w": np.arange(24, dtype=np.float32).reshape(6, 4), "b": np.array([1.5, -2.0])},
        "opt": {"state": {0: {"exp_avg": np.zeros((16, 4), np.float32)}}, "lr": 1e-3},
        "steps": [np.array([True, False, True]), np.int64(7)],
        "epoch": 3, "name": "run", "best": float("inf"), "none": None,
    }


_SEEDS: dict = {}
LAZYSTORE_SEEDS = ("tree.lzy", "mixed.lzy", "digests.lzy")


def _seeds() -> dict:
    # Tests call this rather than take a fixture, so that hypothesis does not
    # print every seed with each failing example.
    return _SEEDS


@pytest.fixture(scope="module", autouse=True)
def _built_seeds(tmp_path_factory):
    """The seeds, built once per module in pytest's temporary folder (which
    pytest removes; the sharded folders must live while the module runs)."""
    _SEEDS.update(_build_seeds(tmp_path_factory.mktemp("fuzz-seeds")))
    yield
    _SEEDS.clear()


def _build_seeds(d: Path) -> dict:
    out = {}
    # A lazystore file: raw and zstd tensors (2 chunks for w), nested tree, user metadata.
    ls.save(_state(), d / "tree.lzy", metadata={"step": 1, "tags": ["a", "b"]}, chunk_bytes=64)
    with ls.Writer(d / "mixed.lzy", chunk_bytes=64, metadata={"s": [1, 2]}) as w:
        w.add("raw", np.arange(48, dtype=np.int16).reshape(12, 4))
        w.add("z", np.arange(64, dtype=np.float32).reshape(16, 4) % 3, compression="zstd")
        w.add("scalar", np.array(2.5))
        w.add("empty", np.zeros((0, 3), np.float32))
    # Format 1.4: the same tensors with BLAKE3 chunk digests (56-byte chunk records).
    with ls.Writer(d / "digests.lzy", chunk_bytes=64, metadata={"s": [1, 2]}, digest="blake3") as w:
        w.add("raw", np.arange(48, dtype=np.int16).reshape(12, 4))
        w.add("z", np.arange(64, dtype=np.float32).reshape(16, 4) % 3, compression="zstd")
        w.add("empty", np.zeros((0, 3), np.float32))
    out["lazystore"] = [(d / n).read_bytes() for n in LAZYSTORE_SEEDS]
    # safetensors: a plain one, and one lazystore wrote (checksums, tree, metadata).
    stnp.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(5, dtype=np.int8),
                    "c": np.zeros((0, 2), np.float64)}, str(d / "plain.safetensors"), metadata={"k": "v"})
    convert_to_safetensors(_state(), d / "ours.safetensors")
    out["safetensors"] = [(d / n).read_bytes() for n in ("plain.safetensors", "ours.safetensors")]
    # A sharded lazystore folder (3 shards), and a Hugging Face one.
    ls.save({f"l{i}": np.full((8, 8), i, np.float32) for i in range(5)}, d / "shards", max_shard_size=600,
            compression="zstd", metadata={"step": 3})
    hf = d / "hf"
    hf.mkdir()
    stnp.save_file({"x": np.ones(4, np.float32)}, str(hf / "model-00001-of-00002.safetensors"))
    stnp.save_file({"y": np.arange(3, dtype=np.int64)}, str(hf / "model-00002-of-00002.safetensors"))
    (hf / sharded.HF_INDEX_NAME).write_text(json.dumps({
        "metadata": {"total_size": 40},
        "weight_map": {"x": "model-00001-of-00002.safetensors", "y": "model-00002-of-00002.safetensors"}}))
    out["folders"] = {"shards": d / "shards", "hf": hf}
    return out


@pytest.fixture(scope="module")
def seeds() -> dict:
    return _seeds()


def convert_to_safetensors(state, path) -> None:
    """Nested state saved as a safetensors file by lazystore (with its checksums)."""
    from lazystore.interop.safetensors import SafetensorsWriter

    structure, leaves = tree.flatten(state)
    with SafetensorsWriter(path, metadata={"step": 2, "note": "x"}) as w:
        w.system_metadata[tree.TREE_KEY] = structure
        for key, leaf in leaves.items():
            w.add(key, tree.as_array(leaf))


@pytest.mark.slow
def test_seeds_are_valid(seeds, tmp_path):
    # The harness accepts every unmutated seed without any error at all.
    for reader in ("lazystore", "safetensors"):
        for i, blob in enumerate(seeds[reader]):
            path = tmp_path / f"{reader}{i}.bin"
            path.write_bytes(blob)
            _touch_everything(path)
    for folder in seeds["folders"].values():
        ls.load(folder)
        with ls.open(folder) as ck:
            assert len(ck) >= 2


# --- lazystore files --------------------------------------------------------------------------


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.integers(0, len(LAZYSTORE_SEEDS) - 1), muts=mutations)
def test_fuzz_lazystore_bytes(tmp_path, which, muts):
    seeds = _seeds()
    path = fresh(tmp_path / "f.lzy")
    path.write_bytes(mutate(seeds["lazystore"][which], muts))
    exercise(path, keep_as="lazystore")


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.integers(0, len(LAZYSTORE_SEEDS) - 1), muts=mutations)
def test_fuzz_lazystore_index_with_valid_checksum(tmp_path, which, muts):
    seeds = _seeds()
    # Confined to the index, checksum recomputed: the index's own checks must catch it.
    blob = seeds["lazystore"][which]
    lo, hi = index_bounds(blob)
    mutated = mutate(blob[:hi], muts, lo) + blob[hi:]
    mutated = refix_index_checksum(mutated, len(mutated) - len(blob))
    path = fresh(tmp_path / "f.lzy")
    path.write_bytes(mutated)
    exercise(path, keep_as="lazystore")


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.integers(0, len(LAZYSTORE_SEEDS) - 1), muts=mutations)
def test_fuzz_lazystore_data_region(tmp_path, which, muts):
    seeds = _seeds()
    # Confined to the data (index intact): reaches chunk reading and decoding.
    blob = seeds["lazystore"][which]
    lo, _ = index_bounds(blob)
    muts = [m for m in muts if m[0] in ("flip", "set", "overwrite", "int")]  # keep the length
    path = fresh(tmp_path / "f.lzy")
    path.write_bytes(mutate(blob, muts, 16, lo)[: len(blob)])
    exercise(path, keep_as="lazystore")


# --- safetensors files --------------------------------------------------------------------------


@seed(SEED)
@FUZZ
@given(which=st.integers(0, 1), header_only=st.booleans(), muts=mutations)
def test_fuzz_safetensors_bytes(tmp_path, which, header_only, muts):
    seeds = _seeds()
    blob = seeds["safetensors"][which]
    n = int.from_bytes(blob[:8], "little")
    path = fresh(tmp_path / "f.safetensors")
    path.write_bytes(mutate(blob, muts, 8 if header_only else 0, 8 + n if header_only else None))
    exercise(path, keep_as="safetensors")


json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from(INTERESTING),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["", "F32", "BF16", "I64", "BOOL", "model-00001-of-00003.lzy", "..", ".", "/etc/passwd",
                     "a" * 300, "x\0y", sharded.INDEX_NAME, "__metadata__", "lazystore.checksums"]),
)
json_value = st.recursive(json_scalar, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)), max_leaves=12)


def json_paths(value, prefix=()):
    """Every path (tuple of keys / indexes) into a JSON value, the root included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from json_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_paths(v, prefix + (i,))


json_edit = st.tuples(st.sampled_from(["replace", "delete", "add", "dup", "wrap"]), st.integers(0, 2**16),
                      json_value, st.text(max_size=8))


def edit_json(value, edits):
    """Apply JSON-level edits: replace a node, delete it, add a member to it,
    duplicate a member (a second entry for the same name, which
    :func:`dumps_with_dups` writes out as a duplicate key), or wrap a node
    in a list."""
    import copy

    value = copy.deepcopy(value)
    for kind, where, new, key in edits:
        paths = list(json_paths(value))
        path = paths[where % len(paths)]
        if not path and kind in ("replace", "delete", "wrap"):
            value = new if kind == "replace" else ([value] if kind == "wrap" else {})
            continue
        parent = value
        for k in path[:-1]:
            parent = parent[k]
        node = parent[path[-1]] if path else value
        if kind == "replace":
            parent[path[-1]] = new
        elif kind == "wrap":
            parent[path[-1]] = [node]
        elif kind == "delete":
            del parent[path[-1]]
        elif kind == "add" and isinstance(node, dict):
            node[key] = new
        elif kind == "add" and isinstance(node, list):
            node.append(new)
        elif kind == "dup" and isinstance(node, dict) and node:
            k = list(node)[where % len(node)]
            dup = DupDict(node)
            dup.dups = getattr(node, "dups", []) + [(k, new if where % 2 else node[k])]
            if path:
                parent[path[-1]] = dup
            else:
                value = dup
    return value


class DupDict(dict):
    """A JSON object with extra (key, value) members in ``dups``, written out
    after the others as duplicate keys."""

    dups: list = []


def dumps_with_dups(value) -> str:
    """json.dumps, except that a DupDict's ``dups`` become real duplicate
    keys in the text."""
    if isinstance(value, dict):
        items = [f"{json.dumps(k)}:{dumps_with_dups(v)}" for k, v in value.items()]
        items += [f"{json.dumps(k)}:{dumps_with_dups(v)}" for k, v in getattr(value, "dups", [])]
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dumps_with_dups(v) for v in value) + "]"
    return json.dumps(value)


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.integers(0, 1), edits=st.lists(json_edit, min_size=1, max_size=4))
def test_fuzz_safetensors_header_json(tmp_path, which, edits):
    seeds = _seeds()
    # JSON-level edits of the header: wrong types, missing fields, odd dtypes,
    # shapes and offsets, duplicate keys; the data is kept as it was.
    blob = seeds["safetensors"][which]
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + n])
    text = dumps_with_dups(edit_json(header, edits)).encode()
    path = fresh(tmp_path / "f.safetensors")
    path.write_bytes(len(text).to_bytes(8, "little") + text + blob[8 + n :])
    exercise(path, keep_as="safetensors")


# --- sharded folders ------------------------------------------------------------------------------


def copy_folder(src: Path, dest: Path) -> Path:
    fresh(dest)
    shutil.copytree(src, dest)
    return dest


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.sampled_from(["shards", "hf"]), shard=st.integers(0, 2), refix=st.booleans(), muts=mutations)
def test_fuzz_sharded_shard_bytes(tmp_path, which, shard, refix, muts):
    seeds = _seeds()
    folder = copy_folder(seeds["folders"][which], tmp_path / "folder")
    shards = sorted(p for p in folder.iterdir() if not p.name.endswith(".json"))
    path = shards[shard % len(shards)]
    blob = path.read_bytes()
    if refix and which == "shards":
        lo, hi = index_bounds(blob)
        mutated = mutate(blob[:hi], muts, lo) + blob[hi:]
        mutated = refix_index_checksum(mutated, len(mutated) - len(blob))
    else:
        mutated = mutate(blob, muts)
    fresh(path).write_bytes(mutated)
    exercise(folder, keep_as="sharded")


SHARD_NAME_EDITS = st.sampled_from([
    "missing.lzy", "../model-00001-of-00003.lzy", "/etc/hostname", "", ".", "..", "a" * 300, "x\0y",
    sharded.INDEX_NAME, sharded.HF_INDEX_NAME, "model-00002-of-00003.lzy", "model-00001-of-00002.safetensors",
    "sub", 3, None, ["model-00001-of-00003.lzy"],
])


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(which=st.sampled_from(["shards", "hf"]),
       edits=st.lists(json_edit, max_size=3),
       renames=st.lists(st.tuples(st.integers(0, 2**16), SHARD_NAME_EDITS), max_size=3),
       extra=st.lists(st.tuples(st.text(max_size=6), SHARD_NAME_EDITS), max_size=2),
       text_muts=st.one_of(st.none(), mutations))
def test_fuzz_sharded_index_json(tmp_path, which, edits, renames, extra, text_muts):
    seeds = _seeds()
    folder = copy_folder(seeds["folders"][which], tmp_path / "folder")
    (folder / "sub").mkdir()  # a folder a hostile index may name as a shard
    index_path = folder / (sharded.INDEX_NAME if which == "shards" else sharded.HF_INDEX_NAME)
    index = json.loads(index_path.read_text())
    wm = index["weight_map"]
    names = list(wm)
    for where, shard_name in renames:  # point a tensor at another / unknown / hostile shard
        wm[names[where % len(names)]] = shard_name
    for name, shard_name in extra:  # tensors no shard holds, or duplicates of held ones
        wm[name or names[0]] = shard_name
    text = dumps_with_dups(edit_json(index, edits)).encode()
    if text_muts is not None:
        text = mutate(text, text_muts)
    fresh(index_path).write_bytes(text)
    exercise(folder, keep_as="sharded")


# --- nested-state trees ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tree_seed():
    structure, leaves = tree.flatten(_state())
    return structure, {k: tree.as_array(v) for k, v in leaves.items()}


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(edits=st.lists(json_edit, min_size=1, max_size=4), drop=st.sets(st.integers(0, 8), max_size=2))
def test_fuzz_tree_metadata(tree_seed, tmp_path, edits, drop):
    # The tree JSON edited, in an otherwise valid file (some tensors dropped):
    # ls.load must build the state or raise FormatError.
    structure, arrays = tree_seed
    edited = edit_json(structure, edits)
    path = fresh(tmp_path / "t.lzy")
    try:
        with ls.Writer(path) as w:
            w.system_metadata[tree.TREE_KEY] = json.loads(dumps_with_dups(edited))
            for i, (name, arr) in enumerate(arrays.items()):
                if i not in drop:
                    w.add(name, arr)
    except ls.InvalidInputError:
        return  # e.g. a float the writer's JSON refuses; not a reader's concern
    exercise(path, keep_as="tree")


# --- chunk-digest declarations (format 1.4) ---------------------------------------------------------


def with_metadata(blob: bytes, metadata: bytes) -> bytes:
    """``blob`` with its metadata section (the index's last) replaced, the
    header's length and the trailer's index length and checksum fixed."""
    lo, hi = index_bounds(blob)
    index = bytearray(blob[lo:hi])
    old = int.from_bytes(index[40:48], "little")
    index[40:48] = len(metadata).to_bytes(8, "little")
    new = bytes(index[: len(index) - old]) + metadata
    return refix_index_checksum(blob[:lo] + new + blob[hi:], len(new) - (hi - lo))


@pytest.mark.slow
@seed(SEED)
@FUZZ
@given(edits=st.lists(json_edit, min_size=1, max_size=3))
def test_fuzz_digest_member(tmp_path, edits):
    # The declaration of a file with digests edited (another version, an
    # unknown algorithm, wrong types, ...): opening, reading and verifying
    # raise LazyStoreError (FormatError, UnsupportedVersionError) or work.
    blob = _seeds()["lazystore"][LAZYSTORE_SEEDS.index("digests.lzy")]
    member = edit_json({"version": 1, "algorithm": "blake3"}, edits)
    text = '{"s":[1,2],"__lazystore_digest__":' + dumps_with_dups(member) + "}"
    path = fresh(tmp_path / "d.lzy")
    path.write_bytes(with_metadata(blob, text.encode()))
    exercise(path, keep_as="lazystore")


# --- regressions ------------------------------------------------------------------------------------


REGRESSION_INPUTS = sorted(p for p in REGRESSIONS.glob("*/*") if p.name != "README.md")


@pytest.mark.parametrize("path", REGRESSION_INPUTS,
                         ids=[f"{p.parent.name}/{p.name}" for p in REGRESSION_INPUTS])
def test_fuzz_regressions(path, tmp_path):
    # Every input a fuzz run ever found escaping, replayed (from a copy: the
    # harness must not touch the committed file or folder).
    copy = tmp_path / path.name
    if path.is_dir():
        shutil.copytree(path, copy)
    else:
        shutil.copyfile(path, copy)
    exercise(copy)
