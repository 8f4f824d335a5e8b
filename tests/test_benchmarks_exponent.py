"""The exponent coder's benchmark (issue 29, `python -m benchmarks.exponent`):
its quick run goes end to end and reports every column it can measure here,
and leaves no file behind. It never asserts on speed: a MISS is a result,
not a failure. Ratios are sizes, so they are checked: every coder shrinks
trained weights."""

import importlib.util
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import exponent
from tests.paths import REPO
from tests.test_benchmarks_smoke import checkout_files

LABELS = ("fp32", "bf16", "bf16_tiled")
# Rows of today's codec, measured whether or not codec 4 is there.
ZSTD_ROWS = {f"ref_exponent_{what}_{label}_zstd" for label in LABELS for what in ("ratio", "cpu", "wall")}
# The targets, once compression="huffman" exists.
TARGET_ROWS = {f"exponent_{what}_{label}" for label in ("fp32", "bf16")
               for what in ("ratio", "cpu", "wall", "save")} | {"exponent_ratio_bf16_zipnn"}


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_quick_exponent_benchmark_run(tmp_path):
    out = tmp_path / "exponent.json"
    work = tmp_path / "work"
    work.mkdir()
    before = checkout_files()
    run = subprocess.run([sys.executable, "-m", "benchmarks.exponent", "--quick", "--workdir", str(work),
                          "--json", str(out)], check=False, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "| exponent coder, codec 4" in run.stdout
    report = json.loads(out.read_text())
    rows = {r["name"]: r for r in report["results"]}

    assert ZSTD_ROWS <= set(rows), sorted(ZSTD_ROWS - set(rows))
    has_zipnn = importlib.util.find_spec("zipnn") is not None
    zipnn_rows = {f"ref_exponent_{what}_{label}_zipnn" for label in LABELS for what in ("ratio", "decode1")}
    assert (zipnn_rows <= set(rows)) == has_zipnn, sorted(rows)
    if "huffman" in report["codecs"]:
        assert TARGET_ROWS <= set(rows), sorted(TARGET_ROWS - set(rows))
        for name in TARGET_ROWS:
            assert rows[name]["status"] in ("PASS", "MISS"), rows[name]
    else:  # the huffman column is left out, not reported as zero
        assert not any("huffman" in (r["subject"], r["anchor_label"]) for r in rows.values())

    for r in rows.values():
        assert _positive(r["ours"]), r
        if r["unit"] == "x":  # a compression ratio: every coder shrinks trained weights
            assert r["ours"] > 1, r
        if r["kind"] == "time":  # every time row knows its bytes, for GB/s
            assert r["nbytes"] and _positive(r["ours_gbps"]), r
    assert list(work.iterdir()) == [] and checkout_files() == before


def test_tiling_repeats_the_same_arrays_up_to_the_size_asked():
    tensors = {"a": np.zeros(1000, np.float32), "b": np.ones(24, np.float32)}
    big = exponent.tiled(tensors, 40_960)
    assert len(big) == 20 and sum(v.nbytes for v in big.values()) == 40_960
    assert all(big[f"copy{i}.a"] is tensors["a"] for i in range(10))


def test_the_delta_series_moves_every_master_weight_by_one_step():
    tensors = {"w": np.linspace(-1, 1, 64, dtype=np.float32)}
    states = exponent.delta_series(tensors)
    assert len(states) == exponent.DELTA_STEPS
    steps = np.abs(states[1]["w"] - states[0]["w"])
    assert np.allclose(steps, exponent.DELTA_STEP, rtol=1e-3)


def test_a_codec_this_lazystore_lacks_is_left_out():
    assert exponent.available("zstd")
    assert not exponent.available("no-such-codec")
    assert exponent.codecs()[0] == "zstd"
