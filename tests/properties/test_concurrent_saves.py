"""Several processes save to one target at once while others read it.

Every save must succeed (the last rename wins), every open must see one
complete version, and no file may be left behind. Create-then-lock races
are found by running processes in a loop, not by reading the code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import lazystore as ls

pytestmark = pytest.mark.slow  # (pyproject.toml: the quick tier leaves these out)

SAVER = textwrap.dedent("""
    import sys, numpy as np, lazystore as ls
    target, me, rounds, shard = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for r in range(rounds):
        v = me * 1000 + r
        ls.save({"v": np.full(4096, v, np.int64), "w": np.full((64, 64), v, np.float32)}, target,
                compression="zstd" if r % 2 else None, metadata={"v": v}, max_shard_size=shard or None)
""")

READER = textwrap.dedent("""
    import sys, time, numpy as np, lazystore as ls
    target, seconds = sys.argv[1], float(sys.argv[2])
    end, opened = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        try:
            ck = ls.open(target)
        except (FileNotFoundError, ls.FormatError) as exc:
            if "no lazystore.index.json" in str(exc) or isinstance(exc, FileNotFoundError):
                continue  # nothing saved yet
            raise
        with ck:
            v = ck.metadata["v"]
            assert (ck["v"] == v).all() and (ck["w"] == v).all(), f"mixed versions: {v}"
            assert ck.verify() == []
        opened += 1
    print(opened)
""")


def run(target, savers: int, rounds: int, shard: int) -> None:
    """``savers`` processes save ``rounds`` versions each while a reader checks every open."""
    procs = [subprocess.Popen([sys.executable, "-c", SAVER, str(target), str(i), str(rounds), str(shard)],
                              stderr=subprocess.PIPE, text=True) for i in range(savers)]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(target), "4"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        if p.returncode:
            errors.append(err.strip().splitlines()[-1] if err.strip() else f"exit {p.returncode}")
    out, err = reader.communicate(timeout=300)
    assert not errors, errors
    assert reader.returncode == 0, err
    assert int(out) > 0
    with ls.open(target) as ck:
        v = ck.metadata["v"]
        assert v % 1000 == rounds - 1 and np.array_equal(ck["v"], np.full(4096, v))


def test_concurrent_savers_and_readers(tmp_path):
    target = tmp_path / "ck.lzy"
    run(target, savers=3, rounds=40, shard=0)
    assert os.listdir(tmp_path) == ["ck.lzy"]


def test_a_sharded_folder_read_while_it_is_saved_again(tmp_path):
    # Readers open the folder while a save replaces it: they see the old save
    # or the new one, never a refusal (an old index's shards may vanish under
    # them: they read the new index instead).
    folder = tmp_path / "ckpt"
    run(folder, savers=1, rounds=60, shard=20_000)
    with open(folder / "lazystore.index.json") as f:
        named = set(json.load(f)["weight_map"].values())
    assert sorted(os.listdir(folder)) == sorted(named | {"lazystore.index.json"})
