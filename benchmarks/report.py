"""Presenting results: the table, the JSON file, the PNG chart, the docs page.

The table is Markdown with aligned columns, so the same text reads well on
a terminal and in docs/benchmarks.md. matplotlib is imported only to draw.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from .measures import Result

BEGIN, END = "<!-- BEGIN RESULTS (written by python -m benchmarks) -->", "<!-- END RESULTS -->"


def log(message: str) -> None:
    """A progress line, on stderr (the table goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


# -- cells ----------------------------------------------------------------------------


def figure(r: Result, value: float | None) -> str:
    if value is None:
        return ""
    if r.unit == "s":
        text = f"{value * 1e6:.3g} µs" if value < 1e-3 else f"{value * 1e3:.3g} ms" if value < 1 else f"{value:.3g} s"
        gbps = r.gbps(value)
        return f"{text} ({gbps:.2f} GB/s)" if gbps else text
    if r.unit == "MiB":
        return f"{value:.0f} MiB" if value >= 100 else f"{value:.3g} MiB"
    if r.unit == "requests":
        return f"{value:.0f}"
    return f"{value:.3f}x"


def ratio_line(r: Result) -> str:
    """A timed row on one line, with the spread of its per-round ratios (for
    a measure run alone)."""
    ratios = sorted(a / b for a, b in zip(*r.samples.values()))
    return (f"{r.name}: {r.ours * 1e3:.1f} ms vs {r.anchor * 1e3:.1f} ms, ratio {r.ratio:.3f} "
            f"(per round {ratios[0]:.3f}-{ratios[-1]:.3f}, {len(ratios)} rounds)")


def target_text(r: Result) -> str:
    t = r.target
    if t is None:
        return ""
    unit = {"MiB": " MiB", "x": "x"}.get(r.unit, "") if t.on == "ours" else ""
    return f"{t.op} {t.value:g}{unit}" + ("" if t.on == "ratio" else " (absolute)")


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(c) for c in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def table(results: list[Result]) -> str:
    """The targets (lazystore vs anchor, same run), then the informational rows."""
    targets = [r for r in results if r.target is not None]
    others = [r for r in results if r.target is None
              and r.group not in ("remote", "dcp", "background", "delta", "verify", "trust", "exponent")]
    remote = [r for r in results if r.group == "remote"]
    dcp = [r for r in results if r.group == "dcp"]
    background = [r for r in results if r.group == "background"]
    delta = [r for r in results if r.group == "delta" and r.target is None]
    verify = [r for r in results if r.group == "verify"]
    trust = [r for r in results if r.group == "trust" and r.target is None]
    exponent = [r for r in results if r.group == "exponent" and r.target is None]
    main = _grid(
        ["measure", "lazystore", "anchor", "ratio", "target", "result"],
        [[f"{r.title} (vs {r.anchor_label})", figure(r, r.ours), figure(r, r.anchor),
          f"{r.ratio:.2f}" if r.ratio is not None else "", target_text(r), r.status or ""] for r in targets],
    )
    notes = "\n".join(
        f"- {r.name}: " + "; ".join(x for x in (r.note, r.earlier and f"earlier: {r.earlier}") if x)
        for r in targets if r.note or r.earlier
    )
    ref = _grid(["reference (no target)", "figure", "earlier"],
                [[f"{r.title} [{r.subject}]", figure(r, r.ours), r.earlier] for r in others])
    passed = sum(r.status == "PASS" for r in targets)
    summary = f"{passed}/{len(targets)} targets met (ratio = lazystore / anchor, medians, same run)."
    text = f"{main}\n\n{summary}\n\n{notes}\n" + (f"\n{ref}\n" if others else "")
    if remote:
        text += "\n" + remote_table(remote) + "\n"
    if dcp:
        text += "\n" + dcp_table(dcp) + "\n"
    if background:
        text += "\n" + background_table(background) + "\n"
    if delta:
        text += "\n" + delta_table(delta) + "\n"
    if verify:
        text += "\n" + _ratio_table("checking on load (no target)", "measured", "compared with", verify,
                                    title=lambda r: f"{r.title} [{r.subject} / {r.anchor_label}]") + "\n"
    if trust:
        text += "\n" + _ratio_table("trusted checkpoints (no target)", "measured", "compared with", trust,
                                    title=lambda r: f"{r.title} [{r.subject} / {r.anchor_label or '-'}]") + "\n"
    if exponent:
        text += "\n" + _ratio_table("exponent coder, codec 4 (no target)", "measured", "compared with", exponent,
                                    title=lambda r: f"{r.title} [{r.subject} / {r.anchor_label or '-'}]") + "\n"
    return text


def _ratio_table(heading: str, ours: str, anchor: str, rows: list[Result], title=lambda r: r.title) -> str:
    """A group's table (no target): each row's two figures and their ratio, same run."""
    return _grid([heading, ours, anchor, "ratio"],
                 [[title(r), figure(r, r.ours), figure(r, r.anchor), f"{r.ratio:.3f}" if r.ratio is not None else ""]
                  for r in rows])


def delta_table(rows: list[Result]) -> str:
    """Delta checkpoints: other ways to store the series, over standalone zstd."""
    return _ratio_table("delta checkpoints (no target)", "stored", "standalone zstd", rows)


def background_table(rows: list[Result]) -> str:
    """Background saves: each figure over the one it is compared with."""
    return _ratio_table("background saves (no target)", "measured", "compared with", rows,
                        title=lambda r: f"{r.title} [{r.anchor_label}]")


def dcp_table(rows: list[Result]) -> str:
    """torch.distributed.checkpoint: lazystore.dcp against FileSystemWriter/Reader."""
    return _ratio_table("distributed checkpoint, dcp (no target)", "lazystore", "FileSystemWriter/Reader", rows)


def hf_table(rows: list[Result]) -> str:
    """transformers' from_pretrained: lazystore weights against its own safetensors load."""
    return _ratio_table("from_pretrained, all-MiniLM-L6-v2 (no target)", "lazystore", "safetensors", rows)


def remote_table(rows: list[Result]) -> str:
    """Remote reads: lazystore against downloading the whole file."""
    return _ratio_table("remote read over loopback HTTP (no target)", "lazystore", "whole file", rows)


# -- the machine ------------------------------------------------------------------------


def _first(path: str, key: str) -> str:
    try:
        with open(path) as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(key)), "")
    except OSError:
        return ""


def _git_commit() -> str:
    def run(*args: str) -> str:
        done = subprocess.run(["git", *args], check=False, capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).parent)
        return done.stdout.strip()

    try:
        commit = run("rev-parse", "--short", "HEAD")
        dirty = commit and run("status", "--porcelain", "--", "../lazystore")
        return commit + (" (lazystore/ has uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict:
    mem_kib = _first("/proc/meminfo", "MemTotal").split()
    import lazystore

    # The code measured, whichever distribution name (or none: PYTHONPATH) it came by.
    versions = {"lazystore": lazystore.__version__}
    for pkg in ("numpy", "zstandard", "xxhash", "safetensors", "torch", "ml_dtypes", "matplotlib", "zipnn"):
        try:
            versions[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "cores": os.cpu_count(),
        "cpu": _first("/proc/cpuinfo", "model name") or platform.processor(),
        "ram_gib": round(int(mem_kib[0]) / (1 << 20), 1) if mem_kib else None,
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions,
        "git_commit": _git_commit(),
    }


# -- outputs -----------------------------------------------------------------------------


def as_json(results: list[Result], info: dict) -> dict:
    return {**info, "results": [r.as_dict() for r in results]}


def chart(results: list[Result], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = [r for r in results if r.target is not None]
    bars: dict[str, tuple[float, str]] = {}  # label -> (GB/s, colour)
    for r in results:
        ours_colour = "tab:blue" if r.subject.startswith(("lazystore", "ls.")) else "0.6"
        if r.gbps(r.ours):
            bars.setdefault(f"lazystore: {r.name}" if r.target else r.subject, (r.gbps(r.ours), ours_colour))
        if r.target and r.gbps(r.anchor):
            bars.setdefault(r.anchor_label, (r.gbps(r.anchor), "0.6"))

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 4 + 0.45 * (len(targets) + len(bars))),
                                      gridspec_kw={"height_ratios": [len(targets), len(bars)]})
    # Every target as the share of its budget used: under 1 passes.
    shares, labels = [], []
    for r in targets:
        value = r.ratio if r.target.on == "ratio" else r.ours
        shares.append(r.target.value / value if r.target.op == ">=" else value / r.target.value)
        labels.append(f"{r.name}: {figure(r, value) if r.target.on == 'ours' else f'{value:.2f}'} ({target_text(r)})")
    colours = ["tab:green" if r.status == "PASS" else "tab:red" for r in targets]
    top.barh(labels[::-1], shares[::-1], color=colours[::-1])
    for i, share in enumerate(shares[::-1]):
        top.annotate(f" {share:.2f}", (share, i), va="center", fontsize=7)
    top.axvline(1.0, color="black", linewidth=1)
    top.set_xlabel("share of the target used (ratio / target; target / value for 'at least' targets): < 1 passes")
    top.set_title("lazystore vs its anchors, same run")

    names = list(bars)[::-1]
    bottom.barh(names, [bars[n][0] for n in names], color=[bars[n][1] for n in names])
    for i, n in enumerate(names):
        bottom.annotate(f" {bars[n][0]:.2f}", (bars[n][0], i), va="center", fontsize=7)
    bottom.set_xscale("log")
    bottom.set_xlabel("GB/s, log scale (blue: lazystore; grey: anchors and references)")
    for ax in (top, bottom):
        ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_section(results: list[Result], info: dict) -> str:
    m = info["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    return "\n".join([
        BEGIN,
        "",
        f"Run {info['created']} in {info['mode']} mode ({info['seconds']:.0f} s): `{info['command']}`",
        "",
        (f"Machine: {m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['kernel']}, "
         f"Python {m['python']}; {versions}; lazystore commit {m['git_commit'] or 'unknown'}."),
        "",
        table(results).rstrip(),
        "",
        "![lazystore benchmarks](benchmarks.png)",
        "",
        END,
    ])


def update_doc(doc: Path, section: str, begin: str = BEGIN, end: str = END) -> bool:
    """Replace the section between ``begin`` and ``end`` (the markers included)
    of an existing docs page; False if it has none."""
    if not doc.exists():
        return False
    text = doc.read_text()
    if begin not in text or end not in text:
        return False
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    doc.write_text(head + section + tail)
    return True


def write(results: list[Result], info: dict, out: Path) -> list[Path]:
    """benchmarks.json and benchmarks.png in ``out``, and the results section of
    ``out/benchmarks.md`` when that page exists."""
    out.mkdir(parents=True, exist_ok=True)
    created = info.get("created") or datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    info = {**info, "created": created}
    written = [out / "benchmarks.json", out / "benchmarks.png"]
    written[0].write_text(json.dumps(as_json(results, info), indent=2) + "\n")
    chart(results, written[1])
    if update_doc(out / "benchmarks.md", markdown_section(results, info)):
        written.append(out / "benchmarks.md")
    return written
