"""The measures: one function each, returning its Result rows.

A measure times lazystore and its anchor together with ``timing.compare``
(interleaved, same run) and returns the target row, plus informational rows
(no target) for the other tools it timed along the way. Ratios are always
lazystore's figure over the anchor's, from the same run.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import xxhash
import zstandard

from . import anchors, workloads
from .timing import Timing, compare
from .workloads import Files, Scale

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Target:
    op: str  # "<=", "<" or ">="
    value: float
    on: str  # "ratio" (ours / anchor) or "ours" (the figure itself)

    def met(self, x: float) -> bool:
        return {"<=": x <= self.value, "<": x < self.value, ">=": x >= self.value}[self.op]


@dataclass
class Result:
    name: str  # stable id
    title: str
    ours: float  # the figure of ``subject``: seconds, MiB or x (see unit)
    anchor: float | None
    unit: str  # "s", "MiB" or "x"
    ratio: float | None  # ours / anchor
    target: Target | None  # None: an informational row
    kind: str  # "time", "memory" or "size"
    subject: str = "lazystore"
    anchor_label: str = ""
    nbytes: int | None = None  # bytes processed, for GB/s
    earlier: str = ""  # the figure measured earlier (from the issue), if any
    note: str = ""
    samples: dict = field(default_factory=dict)
    group: str = ""  # "remote": shown in a table of its own, against its anchor

    @property
    def status(self) -> str | None:
        if self.target is None:
            return None
        value = self.ratio if self.target.on == "ratio" else self.ours
        return "PASS" if self.target.met(value) else "MISS"

    def gbps(self, seconds: float | None) -> float | None:
        return self.nbytes / seconds / 1e9 if self.kind == "time" and self.nbytes and seconds else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(status=self.status, ours_gbps=self.gbps(self.ours), anchor_gbps=self.gbps(self.anchor))
        return d


def size_label(n: int) -> str:
    return f"{n / GiB:.3g} GiB" if n >= GiB else f"{n / MiB:.3g} MiB"


def timed(name, title, timings: dict[str, Timing], subject, anchor=None, *, target=None, **extra) -> Result:
    """A row from ``compare``'s timings: the medians of ``subject`` and ``anchor``."""
    ours = timings[subject].median
    base = timings[anchor].median if anchor else None
    samples = {subject: list(timings[subject].samples)}
    if anchor:
        samples[anchor] = list(timings[anchor].samples)
    return Result(
        name, title, ours, base, "s", ours / base if base else None, target, "time",
        subject=subject, anchor_label=anchor or "", samples=samples, **extra,
    )


@dataclass
class Context:
    """What the measures share: the scale, the files, and two big buffers."""

    scale: Scale
    files: Files
    checkpoint: dict | None  # the synthetic tensors, until the save measure takes them
    _plain: np.ndarray | None = None

    def take_checkpoint(self) -> dict:
        """The tensors in memory; the context lets go, so they are freed after use."""
        tensors, self.checkpoint = self.checkpoint, None
        if tensors is None:
            tensors = workloads.checkpoint(self.scale.layers)
        return tensors

    def plain_bytes(self) -> np.ndarray:
        """The checkpoint's tensor bytes back to back, in memory (read once, shared)."""
        if self._plain is None:
            self._plain = np.empty(self.files.ckpt_nbytes, dtype=np.uint8)
            anchors.plain_read_into(self.files.ckpt["bin"], self._plain)
        return self._plain

    def drop_plain(self) -> None:
        self._plain = None


# -- the measures, in the order -------------------------------------------


def _resident(load, *args, then=anchors.touch_pages):
    """``load(*args)``, then every page of what it returned is touched."""

    def load_and_touch():
        result = load(*args)
        then(list(result.values()) if isinstance(result, dict) else [result])
        return result

    return load_and_touch


def load(ctx: Context) -> list[Result]:
    # "Into memory" means every byte readable without further I/O or faults:
    # each case touches every page of what it loaded (lazy loaders that map
    # the file, as ls.load does for raw tensors, pay their faults there).
    f = ctx.files
    buf = ctx.plain_bytes()
    cases = {
        "lazystore": _resident(anchors.ls_load, f.ckpt["lzy"]),
        "safetensors load_file": _resident(anchors.st_load, f.ckpt["safetensors"]),
        "torch.load": _resident(anchors.torch_load, f.ckpt["pt"]),
        "torch.load(mmap=True)": _resident(anchors.torch_load, f.ckpt["pt"], True),
        "np.load (.npz)": _resident(anchors.npz_load, f.ckpt["npz"]),
        "plain read": _resident(anchors.plain_read_into, f.ckpt["bin"], buf),
        "ls.load, untouched": partial(anchors.ls_load, f.ckpt["lzy"]),
        "ls.load, every page written": _resident(anchors.ls_load, f.ckpt["lzy"], then=anchors.write_pages),
    }
    t = compare(cases, reps=ctx.scale.reps)
    n, size = f.ckpt_nbytes, size_label(f.ckpt_nbytes)
    return [
        timed("load_all", f"load all {size} into memory", t, "lazystore", "safetensors load_file",
              target=Target("<=", 0.6, "ratio"), nbytes=n,
              note="every case then reads one byte per 4 KiB page of every array, so all of it is resident"),
        timed("ref_st_load", f"safetensors load_file, {size}", t, "safetensors load_file", nbytes=n,
              earlier="1.36 GB/s"),
        timed("ref_torch_load", f"torch.load, {size}", t, "torch.load", nbytes=n, earlier="1.73 GB/s"),
        timed("ref_torch_load_mmap", f"torch.load(mmap=True), {size}, every page touched", t,
              "torch.load(mmap=True)", nbytes=n),
        timed("ref_npz_load", f"np.load of .npz, every array, {size}", t, "np.load (.npz)", nbytes=n),
        timed("ref_read", f"plain file read into a preallocated buffer, {size}", t, "plain read", nbytes=n,
              earlier="4.6 GB/s"),
        timed("ref_ls_load_lazy", f"ls.load alone, {size}: raw tensors are copy-on-write maps, no data read", t,
              "ls.load, untouched"),
        timed("ref_ls_load_written", f"ls.load, then a write to every page (private copies, as training makes), {size}",
              t, "ls.load, every page written", nbytes=n),
    ]


def memcpy(ctx: Context) -> list[Result]:
    src = ctx.plain_bytes()
    dst = np.empty_like(src)
    t = compare({"np.copyto": partial(np.copyto, dst, src)}, reps=2 * ctx.scale.reps)
    return [timed("ref_memcpy", f"memcpy (np.copyto), {size_label(src.nbytes)}", t, "np.copyto",
                  nbytes=src.nbytes, earlier="8.6 GB/s")]


def read_one(ctx: Context) -> list[Result]:
    f = ctx.files
    name = f.block_name
    cases = {
        "lazystore": partial(anchors.ls_read_one, f.blocks["lzy"], name),
        "safetensors": partial(anchors.st_read_one, f.blocks["safetensors"], name),
        "torch.load(mmap=True)": partial(anchors.torch_read_one, f.blocks["pt"], name),
    }
    sums = [fn() for fn in cases.values()]
    assert np.allclose(sums, sums[0], rtol=1e-3, atol=1e-2), f"the tools read different values: {sums}"
    t = compare(cases, reps=ctx.scale.small_reps)
    what = f"open, read one 8 MiB tensor in full (sum), close ({f.blocks_nbytes // (8 * MiB)} x 8 MiB file)"
    return [
        timed("read_one", what, t, "lazystore", "safetensors", target=Target("<=", 0.6, "ratio"),
              note="safetensors: safe_open(path, 'np') + get_tensor",
              earlier="safetensors get_tensor + sum of one 8 MiB tensor: 3.8 ms"),
        timed("ref_torch_read_one", "torch.load(mmap=True) + one 8 MiB tensor's sum", t, "torch.load(mmap=True)"),
    ]


def open_many(ctx: Context) -> list[Result]:
    f = ctx.files
    cases = {
        "lazystore": partial(anchors.ls_read_one, f.tiny["lzy"], f.tiny_name),
        "safetensors": partial(anchors.st_read_one, f.tiny["safetensors"], f.tiny_name),
    }
    t = compare(cases, reps=max(5, ctx.scale.small_reps // 3))
    return [timed("open_many", f"open a {f.tiny_count:,}-tensor file, read one tensor, close", t,
                  "lazystore", "safetensors", target=Target("<=", 0.5, "ratio"),
                  earlier="safetensors safe_open, 100,000 tensors: 248 ms")]


def verify(ctx: Context) -> list[Result]:
    path = ctx.files.blocks["lzy"]
    data = anchors.plain_read_into(path, np.empty(os.path.getsize(path), dtype=np.uint8))
    damaged = anchors.ls_verify(path)
    assert damaged == [], f"verify reports damage in a fresh file: {damaged[:5]}"
    cases = {
        "lazystore": partial(anchors.ls_verify, path),
        "xxh3-64": partial(xxhash.xxh3_64_intdigest, data),
    }
    t = compare(cases, reps=ctx.scale.small_reps)
    n, size = data.nbytes, size_label(data.nbytes)
    return [
        timed("verify", f"verify a {size} raw file", t, "lazystore", "xxh3-64",
              target=Target("<=", 1.5, "ratio"), nbytes=n,
              note="anchor: one xxh3-64 pass over the file's bytes already in memory"),
        timed("ref_xxh3", f"xxh3-64, one pass in memory, {size}", t, "xxh3-64", nbytes=n, earlier="8.0 GB/s"),
    ]


def zstd_load(ctx: Context) -> list[Result]:
    f = ctx.files
    blob = zstandard.ZstdCompressor(level=3, threads=-1).compress(ctx.plain_bytes())
    ctx.drop_plain()  # keep at most three checkpoint-sized buffers alive
    dctx = zstandard.ZstdDecompressor()
    cases = {
        "lazystore": partial(anchors.ls_load, f.ckpt["zstd.lzy"]),
        "zstd-3 decompress": partial(dctx.decompress, blob),
    }
    t = compare(cases, reps=ctx.scale.reps)
    n, size = f.ckpt_nbytes, size_label(f.ckpt_nbytes)
    stored = os.path.getsize(f.ckpt["zstd.lzy"])
    return [
        timed("zstd_load", f"ls.load of a {size} zstd checkpoint", t, "lazystore", "zstd-3 decompress",
              target=Target("<=", 1.0, "ratio"), nbytes=n,
              note=(f"anchor: one zstd-3 blob of the same bytes ({n / len(blob):.3f}x); "
                    f"the lazystore file is {n / stored:.3f}x")),
        timed("ref_zstd_decompress", f"zstd-3 decompress, one blob, {size}", t, "zstd-3 decompress", nbytes=n),
    ]


# Runs in a fresh interpreter: argv = tool, path, tensor name.
_RSS_SCRIPT = """
import json, resource, sys
import numpy
tool, path, name = sys.argv[1:]
if tool == "lazystore":
    import lazystore
else:
    from safetensors import safe_open
rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
baseline = rss()
if tool == "lazystore":
    with lazystore.open(path) as ck:
        total = float(ck[name].sum())
else:
    with safe_open(path, "np") as f:
        total = float(f.get_tensor(name).sum())
peak = rss()
try:  # the kernel's own high-water mark of this address space, as a cross-check
    hwm = next(int(l.split()[1]) / 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
except (OSError, StopIteration):
    hwm = None
print(json.dumps({"baseline": baseline, "peak": peak, "vmhwm": hwm}))
"""
# Linux carries ru_maxrss across exec: a child of this (big) process would
# report this process's RSS. A small launcher in between gives the measured
# process a clean start.
_LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def _peak_rss(tool: str, path, name: str) -> dict:
    cmd = [sys.executable, "-c", _LAUNCHER, sys.executable, "-c", _RSS_SCRIPT, tool, str(path), name]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def peak_rss(ctx: Context) -> list[Result]:
    f = ctx.files
    ours = _peak_rss("lazystore", f.ckpt["zstd.lzy"], f.big_name)
    theirs = _peak_rss("safetensors", f.ckpt["safetensors"], f.big_name)
    size = size_label(f.ckpt_nbytes)
    return [
        Result("peak_rss", f"peak RSS reading one 16 MiB tensor from a {size} compressed file",
               ours["peak"], theirs["peak"], "MiB", ours["peak"] / theirs["peak"], Target("<", 200, "ours"),
               "memory", anchor_label="safetensors, same tensor, raw file",
               note=(f"fresh process, ru_maxrss (VmHWM {ours['vmhwm'] or 0:.0f} MiB); "
                     f"safetensors' import-only baseline: {theirs['baseline']:.0f} MiB")),
        Result("ref_rss_baseline", "RSS after import lazystore, numpy (same process, before reading)",
               ours["baseline"], None, "MiB", None, None, "memory"),
    ]


def _plain_zstd(tensors: dict, level: int) -> int:
    """Bytes of one zstd frame of the tensors' bytes back to back."""
    cctx = zstandard.ZstdCompressor(level=level)
    return len(cctx.compress(b"".join(np.ascontiguousarray(v).tobytes() for v in tensors.values())))


def _byte_grouped_zstd(tensors: dict, level: int) -> int:
    """Bytes after splitting the concatenated bytes (per item size) into byte
    planes and compressing each plane as one zstd frame."""
    by_size: dict[int, list] = {}
    for v in tensors.values():
        by_size.setdefault(v.dtype.itemsize, []).append(np.ascontiguousarray(v).reshape(-1).view(np.uint8))
    cctx = zstandard.ZstdCompressor(level=level)
    total = 0
    for itemsize, parts in by_size.items():
        grouped = np.concatenate(parts).reshape(-1, itemsize)
        total += sum(len(cctx.compress(np.ascontiguousarray(grouped[:, j]))) for j in range(itemsize))
    return total


def minilm(ctx: Context) -> list[Result]:
    weights = workloads.minilm(ctx.scale.minilm_tensors)
    rows = []
    for variant, tensors, goal, earlier in (
        ("fp32", weights, 1.20, ("1.09x", "1.21x")),
        ("bf16", workloads.to_bfloat16(weights), 1.47, ("1.28x", "1.46x")),
    ):
        n = workloads.nbytes(tensors)
        path = ctx.files.scratch(f"minilm-{variant}.lzy")
        anchors.ls_save(tensors, path, compression="zstd")
        ours = n / os.path.getsize(path)
        path.unlink()
        plain = n / _plain_zstd(tensors, 3)
        what = f"all-MiniLM-L6-v2 {variant} ({len(tensors)} tensors, {n / MiB:.1f} MiB)"
        rows += [
            Result(f"minilm_{variant}", f"compression of {what}", ours, plain, "x", ours / plain,
                   Target(">=", goal, "ours"), "size", anchor_label="plain zstd-3 of the concatenated bytes",
                   note="size ratio = tensor bytes / lazystore file size", earlier=f"plain zstd-3: {earlier[0]}"),
            Result(f"ref_minilm_{variant}_grouped", f"byte-grouped zstd-1 of {what}",
                   n / _byte_grouped_zstd(tensors, 1), None, "x", None, None, "size",
                   subject="byte-grouped zstd-1", earlier=earlier[1]),
        ]
    return rows


REMOTE_LAYERS = 32
REMOTE_LAYER = 7  # the layer loaded


def _remote_files(ctx: Context) -> dict[str, Path]:
    """A 32-layer checkpoint, raw and zstd: the full run's own checkpoint, or
    in quick mode one of 32 layers with every dimension a quarter as long."""
    f = ctx.files
    if ctx.scale.layers == REMOTE_LAYERS:
        return {"raw": f.ckpt["lzy"], "zstd": f.ckpt["zstd.lzy"]}
    tensors = workloads.checkpoint(REMOTE_LAYERS, seed=3, shrink=4)
    paths = {"raw": f.scratch("remote.lzy"), "zstd": f.scratch("remote.zstd.lzy")}
    anchors.ls_save(tensors, paths["raw"])
    anchors.ls_save(tensors, paths["zstd"], compression="zstd")
    return paths


def remote(ctx: Context) -> list[Result]:
    """Load 1 of 32 layers over HTTP (loopback, a server honouring Range)
    against downloading the whole file: bytes fetched, requests, time."""
    import fsspec

    import lazystore as ls
    from lazystore.testing.rangeserver import RangeServer

    paths = _remote_files(ctx)
    maps = {}
    for variant, path in paths.items():
        with open(path, "rb") as fh:
            maps[variant] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    http = fsspec.filesystem("http")
    keys = f"layers.{REMOTE_LAYER}.*"
    rows = []
    with RangeServer({f"{v}.lzy": m for v, m in maps.items()}) as server:
        for variant in paths:
            url = server.url(f"{variant}.lzy")
            size = len(maps[variant])

            def load_layer(url=url):
                return ls.load(url, keys=keys)

            def download(url=url):
                return http.cat_file(url)

            counts = {}
            for case, fn in (("lazystore", load_layer), ("download", download)):
                server.clear()
                result = fn()
                counts[case] = (len(server.requests), server.bytes_served)
                if case == "lazystore":
                    layer = sum(a.nbytes for a in result.values())
                    assert len(result) == len(workloads.LAYER), sorted(result)
                del result
            assert counts["download"][1] == size
            t = compare({"lazystore": load_layer, "download": download}, reps=ctx.scale.reps)
            what = f"1 of {REMOTE_LAYERS} layers ({size_label(layer)} of {size_label(size)}, {variant})"
            (ours_n, ours_b), (whole_n, whole_b) = counts["lazystore"], counts["download"]
            common = dict(anchor_label="download the whole file", group="remote")
            rows += [
                Result(f"remote_{variant}_bytes", f"bytes fetched: open + load {what}", ours_b / MiB,
                       whole_b / MiB, "MiB", ours_b / whole_b, None, "size",
                       note=f"{ours_b:,} bytes vs {whole_b:,}", **common),
                Result(f"remote_{variant}_requests", f"requests: open + load {what}", ours_n, whole_n,
                       "requests", ours_n / whole_n, None, "size",
                       note="HEAD for the size, one range for the index, then the layer's ranges", **common),
                timed(f"remote_{variant}_time", f"time over loopback HTTP: open + load {what}", t,
                      "lazystore", "download", group="remote"),
            ]
    for m in maps.values():
        try:
            m.close()
        except BufferError:
            pass  # a view is still alive somewhere; freed with it
    for path in paths.values():
        if path not in ctx.files.ckpt.values():
            path.unlink()
    return rows


DCP_LAYERS = 8  # at most: 256 MiB of float32 in 48 tensors (quick mode: the run's own layers)


def _du(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def dcp(ctx: Context) -> list[Result]:
    """torch.distributed.checkpoint with lazystore's storage (lazystore.dcp)
    against DCP's FileSystemWriter/Reader, on one state dict in one process
    (no_dist=True): save, load, size on disk, bytes read to load one tensor."""
    import warnings

    import torch
    import torch.distributed.checkpoint as tdcp

    import lazystore as ls
    from lazystore.dcp import LazyStoreReader, LazyStoreWriter, rank_file
    from lazystore.testing.rangeserver import RangeServer

    warnings.filterwarnings("ignore", module="torch.distributed")
    tensors = workloads.checkpoint(min(ctx.scale.layers, DCP_LAYERS), seed=5)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    state["step"] = 1000
    n = workloads.nbytes(tensors)
    root = ctx.files.scratch("dcp")
    dirs = {"lazystore": root / "lzy", "lazystore zstd": root / "zstd", "FileSystemWriter": root / "fs"}
    writers = {"lazystore": lambda p: LazyStoreWriter(p),
               "lazystore zstd": lambda p: LazyStoreWriter(p, compression="zstd"),
               "FileSystemWriter": lambda p: tdcp.FileSystemWriter(p)}
    # The state holds an int step, which DCP pickles: our own checkpoint, so trusted.
    readers = {"lazystore": lambda p: LazyStoreReader(p, allow_pickle=True),
               "lazystore zstd": lambda p: LazyStoreReader(p, allow_pickle=True),
               "FileSystemWriter": tdcp.FileSystemReader}

    def clean() -> None:
        for d in dirs.values():
            if d.exists():
                for p in d.iterdir():
                    p.unlink()
        os.sync()

    def saver(label):
        return lambda: tdcp.save(state, storage_writer=writers[label](dirs[label]), no_dist=True)

    t_save = compare({label: saver(label) for label in dirs}, reps=ctx.scale.reps, setup=clean)
    for label in dirs:  # leave one of each for the load
        saver(label)()
    sizes = {label: _du(d) for label, d in dirs.items()}

    def loader(label, keys=None):
        def run():
            target = {k: torch.empty_like(v) for k, v in state.items() if k != "step" and (keys is None or k in keys)}
            if keys is None:
                target["step"] = 0
            tdcp.load(target, storage_reader=readers[label](dirs[label]), no_dist=True)
            return target
        return run

    check = loader("lazystore zstd")()
    assert all(torch.equal(check[k], state[k]) for k in tensors) and check["step"] == 1000
    del check
    t_load = compare({label: loader(label) for label in dirs}, reps=ctx.scale.reps)

    # Bytes read to load one tensor: lazystore's files served over loopback HTTP,
    # counted by the server; FileSystemReader reads .metadata and the whole item
    # (torch.load of its byte range), read from its own metadata.
    one = "layers.0.mlp.up" if "layers.0.mlp.up" in tensors else next(iter(tensors))
    fs_md = tdcp.FileSystemReader(dirs["FileSystemWriter"]).read_metadata()
    fs_item = next(v for k, v in fs_md.storage_data.items() if k.fqn == one)
    fs_bytes = (dirs["FileSystemWriter"] / ".metadata").stat().st_size + fs_item.length
    served = {}
    tags = {"lazystore": "raw", "lazystore zstd": "zstd"}
    files = {f"{tag}/{p.name}": p.read_bytes() for label, tag in tags.items() for p in dirs[label].iterdir()}
    with RangeServer(files) as server:
        for label, tag in tags.items():
            target = {one: torch.empty_like(state[one])}
            server.clear()
            tdcp.load(target, storage_reader=LazyStoreReader(server.url(tag)), no_dist=True)
            assert torch.equal(target[one], state[one])
            served[label] = server.bytes_served
    with ls.open(dirs["lazystore"] / rank_file(0)) as ck:
        one_nbytes = ck.info(next(k for k in ck if k.startswith(one + "["))).nbytes
    clean()

    size, common = size_label(n), dict(anchor_label="FileSystemWriter/Reader", group="dcp")
    rows = []
    for label in ("lazystore", "lazystore zstd"):
        tag = "raw" if label == "lazystore" else "zstd"
        rows += [
            Result(f"dcp_save_{tag}", f"dcp.save {size}, {tag}", t_save[label].median,
                   t_save["FileSystemWriter"].median,
                   "s", t_save[label].median / t_save["FileSystemWriter"].median, None, "time", nbytes=n,
                   samples={k: list(t_save[k].samples) for k in (label, "FileSystemWriter")}, **common),
            Result(f"dcp_load_{tag}", f"dcp.load {size}, {tag}", t_load[label].median,
                   t_load["FileSystemWriter"].median,
                   "s", t_load[label].median / t_load["FileSystemWriter"].median, None, "time", nbytes=n,
                   samples={k: list(t_load[k].samples) for k in (label, "FileSystemWriter")}, **common),
            Result(f"dcp_size_{tag}", f"size on disk, {tag}", sizes[label] / MiB, sizes["FileSystemWriter"] / MiB,
                   "MiB", sizes[label] / sizes["FileSystemWriter"], None, "size",
                   note=f"{sizes[label]:,} bytes vs {sizes['FileSystemWriter']:,}", **common),
            Result(f"dcp_one_bytes_{tag}", f"bytes read: dcp.load of one {size_label(one_nbytes)} tensor, {tag}",
                   served[label] / MiB, fs_bytes / MiB, "MiB", served[label] / fs_bytes, None, "size",
                   note=f"{served[label]:,} bytes (counted by the server) vs {fs_bytes:,} "
                        "(.metadata + the whole item)", **common),
        ]
    return rows


# Run order = the order; memcpy right after load, which reads the bytes it copies.
from .decode import minilm_decode  # noqa: E402 - a cycle: decode builds its rows with this module's helpers
from .durable import save  # noqa: E402 - the same cycle as decode's
from .many import many_tensors  # noqa: E402 - the same cycle as decode's

MEASURES = (save, load, memcpy, read_one, open_many, many_tensors, verify, zstd_load, peak_rss, minilm, minilm_decode,
            remote, dcp)
