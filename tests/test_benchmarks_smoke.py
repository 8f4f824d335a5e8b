"""Smoke test of the benchmark suite: `python -m benchmarks --quick` runs end
to end, writes complete results, and leaves the checkout as it found it. It
never asserts on speed: a MISS is a result, not a failure."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import finetune
from tests.paths import REPO

# The targets, by their ids in benchmarks.json.
TARGETS = {
    "save_durable", "save_durable_plain", "load_all", "read_one", "open_many", "load_many", "read_each_many",
    "verify", "zstd_load",
    "peak_rss", "minilm_fp32", "minilm_bf16", "bg_pause",
    "torch_load_file", "torch_load_keys", "torch_load_model",  # lazystore.torch against safetensors.torch
    "delta_series_1", "delta_frozen", "delta_series_save", "delta_restore_latest", "delta_restore_oldest",
    "delta_pause",
}
# Informational rows the issue asks for (physical limits and other tools).
REFERENCES = {
    "ref_memcpy", "ref_read", "ref_write", "ref_xxh3", "ref_zstd_decompress", "ref_st_save", "ref_st_load",
    "ref_torch_save", "ref_torch_load", "ref_torch_load_mmap", "ref_npz_save", "ref_npz_load",
    "ref_rss_baseline", "ref_minilm_fp32_grouped", "ref_minilm_bf16_grouped",
}
# Loading 1 of 32 layers over loopback HTTP against downloading the whole file.
REMOTE = {f"remote_{v}_{what}" for v in ("raw", "zstd") for what in ("bytes", "requests", "time")}
# torch.distributed.checkpoint through lazystore.dcp against FileSystemWriter/Reader.
DCP = {f"dcp_{what}_{v}" for v in ("raw", "zstd") for what in ("save", "load", "size", "one_bytes")}
# Delta checkpoints: the series stored other ways, and with the AdamW moments (quick: every step only).
DELTA = {"delta_series_1_star", "delta_series_1_long", "delta_series_1_chain", "delta_series_1_first",
         "delta_series_1_adamw"}
# What checking on load costs: load_file warm and cold, verify on against off, safetensors, safetensors + xxh3.
VERIFY = {f"verify_load_{state}{vs}" for state in ("warm", "cold") for vs in ("", "_off", "_st_hashed", "_unchecked")}
# The exponent coder's benchmark (benchmarks/exponent.py): today's codec's rows, there with or without codec 4.
EXPONENT = {f"ref_exponent_{what}_{v}_zstd" for v in ("fp32", "bf16", "bf16_tiled")
            for what in ("ratio", "cpu", "wall")}
# Background saves: pauses, a real training loop's step time, thread vs process writers, memory.
BACKGROUND = {
    "bg_pause_vs_memcpy", "bg_durable", "bg_dcp_async_pause", "bg_dcp_async_durable", "bg_train_overhead",
    "bg_train_overhead_zstd", "bg_train_overhead_blocking", "bg_train_thread_writer", "bg_train_process_writer",
    "bg_train_thread_vs_process",
    "bg_peak_rss",
}


def checkout_files() -> set[str]:
    """Every file in the checkout, ignored ones included, but git's own and
    the bytecode caches Python writes beside the modules it imports."""
    found = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__")]
        found.update(os.path.relpath(os.path.join(root, f), REPO) for f in files)
    return found


def test_the_finetune_cache_is_outside_the_checkout(monkeypatch, tmp_path):
    """Where full runs keep the fine-tune (docs/benchmarks.md says how to clear it)."""
    monkeypatch.delenv(finetune.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert finetune.cache_dir() == tmp_path / "xdg" / "lazystore-bench" / "finetune"
    for unset in ("", "relative/cache"):  # the XDG spec has a relative value ignored
        monkeypatch.setenv("XDG_CACHE_HOME", unset)
        assert finetune.cache_dir() == Path.home() / ".cache" / "lazystore-bench" / "finetune"
    assert REPO not in finetune.cache_dir().parents
    monkeypatch.setenv(finetune.CACHE_ENV, str(tmp_path / "mine"))
    assert finetune.cache_dir() == tmp_path / "mine"


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_quick_benchmark_run(tmp_path):
    out = tmp_path / "out"
    before = checkout_files()
    # Where a full run would cache the fine-tune: a quick run must not.
    env = {**os.environ, finetune.CACHE_ENV: str(tmp_path / "finetune-cache")}
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out), "--workdir", str(tmp_path)],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=900, env=env,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    after = checkout_files()
    assert after == before, {"written": sorted(after - before), "removed": sorted(before - after)}
    assert "| measure" in run.stdout  # the table went to stdout

    report = json.loads((out / "benchmarks.json").read_text())
    assert report["mode"] == "quick"
    assert report["machine"]["cores"] and report["machine"]["versions"]["numpy"]
    rows = {r["name"]: r for r in report["results"]}
    expected = TARGETS | REFERENCES | REMOTE | DCP | BACKGROUND | DELTA | VERIFY | EXPONENT
    assert expected <= set(rows), sorted(expected - set(rows))

    for name in TARGETS:
        r = rows[name]
        assert r["target"] is not None and r["status"] in ("PASS", "MISS"), r
        for key in ("ours", "anchor", "ratio"):
            assert _positive(r[key]), (name, key, r[key])
    for r in rows.values():
        assert _positive(r["ours"]), (r["name"], r["ours"])
    for name in REMOTE:
        r = rows[name]
        assert r["target"] is None and r["group"] == "remote" and _positive(r["anchor"]), r
    for v in ("raw", "zstd"):  # one layer of 32: a small share of the file
        assert rows[f"remote_{v}_bytes"]["ratio"] < 0.1
    assert "| remote read over loopback HTTP" in run.stdout
    for name in DCP:
        r = rows[name]
        assert r["target"] is None and r["group"] == "dcp" and _positive(r["anchor"]), r
    assert "| distributed checkpoint, dcp" in run.stdout
    for name in BACKGROUND:
        r = rows[name]
        assert r["target"] is None and r["group"] == "background" and _positive(r["anchor"]), r
    assert "| background saves" in run.stdout
    for name in VERIFY:
        r = rows[name]
        assert r["target"] is None and r["group"] == "verify" and _positive(r["anchor"]), r
    assert "| checking on load" in run.stdout
    for name in EXPONENT:
        r = rows[name]
        assert r["target"] is None and r["group"] == "exponent", r
    assert "| exponent coder, codec 4" in run.stdout

    png = out / "benchmarks.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Only the page's own copy is ever updated; none here.
    assert not (out / "benchmarks.md").exists()
    # The temporary files were cleaned up, the quick run's fine-tune with them: only the output folder is left.
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
