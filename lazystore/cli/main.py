"""The ``lazystore`` command line (also ``python -m lazystore``).

A thin layer over the public API: every subcommand opens checkpoints with
:func:`lazystore.open` and writes them with :class:`lazystore.Writer`, so any
input format ``open`` learns to read works here unchanged. Output formats are
chosen in one place, :func:`open_output`.

Exit codes: 0 success (``verify``: intact; ``diff``: same), 1 ``verify``:
corrupt / ``diff``: different / ``ls``: no tensor matches the glob, 2 usage
errors and unreadable input. Expected errors print one line on stderr, never
a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np

import lazystore as ls

from lazystore.interop import archives
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.interop.sharded import ShardedWriter
from lazystore.training.tree import TREE_KEY

PROG = "lazystore"

# diff reads tensors in blocks of about this many bytes per file.
DIFF_BLOCK_BYTES = 16 << 20
# verify checks tensors in batches of about this many stored bytes, so the
# progress bar moves while each batch is still checked in parallel.
VERIFY_BATCH_BYTES = 64 << 20


class CliError(Exception):
    """An expected failure: printed as one line, exit code 2."""


# -- formatting ------------------------------------------------------------------

_DTYPE_NAMES = {spec.dtype: spec.name for spec in ls.DTYPES}


def human_size(n: int) -> str:
    """1024-based sizes: "512 B", "4.0 KiB", "4.0 MiB", "1.5 GiB"."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_shape(shape) -> str:
    """A shape as Python writes a tuple: "()", "(5,)", "(2048, 1024)"."""
    return str(tuple(int(d) for d in shape))


def dtype_name(dtype) -> str:
    """The format's name of a dtype ("float32", "bfloat16", ...)."""
    dtype = np.dtype(dtype)
    return _DTYPE_NAMES.get(dtype.newbyteorder("<") if dtype.byteorder in "<>=" else dtype, str(dtype))


def codec_name(compression) -> str:
    return compression or "raw"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ratio(nbytes: int, stored_nbytes: int) -> float | None:
    return nbytes / stored_nbytes if stored_nbytes else None


_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
# KB, MB, ... are decimal, as Hugging Face and disk vendors count; KiB, MiB, ... binary.
_SIZE_UNITS = {"": 1, "b": 1,
               **{p + "b": 1000**i for i, p in enumerate("kmgtp", start=1)},
               **{p + "ib": 1024**i for i, p in enumerate("kmgtp", start=1)}}


def parse_size(text: str) -> int:
    """Bytes from "123", "500MB" (10**6), "2GiB" (2**30), "1.5 GB"...

    KB/MB/GB/TB/PB are decimal; KiB/MiB/GiB/TiB/PiB binary. Bare "K"/"M"/"G"
    are refused as ambiguous."""
    m = _SIZE.fullmatch(text)
    unit = m.group(2).lower() if m else None
    if unit not in _SIZE_UNITS:
        raise ValueError(f"invalid size {text!r}: use bytes or a unit such as 500MB, 2GiB")
    n = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if n <= 0:
        raise ValueError(f"invalid size {text!r}: must be positive")
    return n


def _size_arg(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _level_arg(text: str) -> int:
    try:
        level = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid level {text!r}: not an integer") from None
    if not 1 <= level <= 22:
        raise argparse.ArgumentTypeError(f"invalid level {level}: zstd levels are 1 to 22")
    return level


def _short_json(value, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _print_table(rows: list[tuple[str, ...]], right: set[int]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())


# -- progress ------------------------------------------------------------------------


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class _RichBar:
    """rich's progress bar behind tqdm's update/close."""

    def __init__(self, total, desc, unit):
        from rich.console import Console
        from rich.progress import Progress

        self._progress = Progress(console=Console(stderr=True), transient=True)
        self._progress.start()
        self._task = self._progress.add_task(desc, total=total)

    def update(self, n):
        self._progress.advance(self._task, n)

    def close(self):
        self._progress.stop()


def _make_bar(total: int | None, desc: str, unit: str):
    """A progress bar on stderr (tqdm, else rich), or None when neither is installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        pass
    else:
        scale = unit == "B"
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                    file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        return _RichBar(total, desc, unit)
    except ImportError:
        return None


def progress(items: Iterable, *, desc: str, total: int | None = None,
             weight: Callable | None = None, unit: str = "B") -> Iterator:
    """Yield ``items``, showing a bar on stderr when stderr is a terminal.

    Each item counts ``weight(item)`` (or 1) once the caller is done with it.
    Piped, or with neither tqdm nor rich installed, it is plain iteration."""
    bar = _make_bar(total, desc, unit) if _stderr_is_tty() else None
    if bar is None:
        yield from items
        return
    try:
        for item in items:
            yield item
            bar.update(weight(item) if weight else 1)
    finally:
        bar.close()


# -- opening inputs, choosing outputs -------------------------------------------------


@contextlib.contextmanager
def about(path):
    """Name ``path`` in any lazystore or OS error raised inside the block."""
    try:
        yield
    except CliError:
        raise
    except ls.LazyStoreError as exc:
        raise CliError(f"{path}: {_one_line(str(exc)) or type(exc).__name__}") from exc
    except OSError as exc:
        raise CliError(_os_error(exc, path)) from exc


def open_input(path, *, verify: bool = False) -> ls.CheckpointView:
    """Open any checkpoint :func:`lazystore.open` reads (lazystore, safetensors,
    sharded folders), or a torch zip / ``.npz`` archive (read through
    ``torch.load(weights_only=True)`` / ``allow_pickle=False`` only).

    Commands that copy or compare data pass ``verify=True``: raw tensors are
    checked against their checksums as they are read, so corrupt bytes stop
    the command instead of being copied into a new file (with fresh checksums)
    or reported as a value difference."""
    with about(path):
        if archives.archive_format(path) is not None:
            return archives.open_archive(path)
        return ls.open(path, verify=verify)


# Output formats by destination. The one place a new one plugs in: name it in
# output_format() and add its opener to OUTPUTS. An opener takes the
# destination and the options below and returns a context manager with
# Writer's interface: add(name, array, compression=...), committed on a clean
# exit and discarded on an exception.
_OUTPUT_EXTENSIONS = {
    ".safetensors": "safetensors",
    ".npz": "npz",
    ".pt": "torch",
    ".pth": "torch",
    ".bin": "torch",
}


def output_format(dst) -> str:
    """The format a destination asks for: by extension, "lazystore" otherwise."""
    if os.path.isdir(dst) or os.fspath(dst).endswith(("/", os.sep)):
        return "folder"
    return _OUTPUT_EXTENSIONS.get(os.path.splitext(os.fspath(dst))[1].lower(), "lazystore")


def _open_lazystore(dst, *, metadata, system_metadata, compression_level, max_shard_size):
    if max_shard_size is not None:
        return _open_folder(dst, metadata=metadata, system_metadata=system_metadata,
                            compression_level=compression_level, max_shard_size=max_shard_size)
    w = ls.Writer(dst, compression_level=compression_level, metadata=metadata)
    w.system_metadata.update(system_metadata)
    return w


def _open_folder(dst, *, metadata, system_metadata, compression_level, max_shard_size):
    w = ShardedWriter(dst, max_shard_size=max_shard_size, compression_level=compression_level, metadata=metadata)
    w.system_metadata.update(system_metadata)
    return w


def _open_safetensors(dst, *, metadata, system_metadata, compression_level, max_shard_size):
    if max_shard_size is not None:
        raise CliError("--max-shard-size writes a lazystore sharded folder; sharded safetensors output "
                       "is not supported")
    w = SafetensorsWriter(dst, metadata=metadata)
    w.system_metadata.update(system_metadata)
    return w


OUTPUTS: dict[str, Callable] = {"lazystore": _open_lazystore, "folder": _open_folder,
                                "safetensors": _open_safetensors}


def open_output(dst, *, metadata: Mapping, system_metadata: Mapping,
                compression_level: int | None = None, max_shard_size: int | None = None):
    """A writer for ``dst`` in the format it asks for (see :func:`output_format`)."""
    fmt = output_format(dst)
    opener = OUTPUTS.get(fmt)
    if opener is None:
        raise CliError(f"{dst}: writing {fmt} output is not supported yet; write a lazystore file (.lzy)")
    with about(dst):
        return opener(dst, metadata=metadata, system_metadata=system_metadata,
                      compression_level=compression_level, max_shard_size=max_shard_size)


def _tensor_compression(choice: str | None, info: ls.TensorInfo):
    """``--compression``: "zstd", "none", or unset to keep each tensor's own."""
    if choice is None:
        return info.compression
    return None if choice == "none" else choice


def _copy_tensors(out, sources: Mapping[str, tuple[str, ls.CheckpointView]], choice, desc: str) -> None:
    """Stream tensors into ``out`` one at a time: name -> (path, view)."""
    total = sum(ck.info(n).nbytes for n, (_, ck) in sources.items())
    for name in progress(sources, desc=desc, total=total, weight=lambda n: sources[n][1].info(n).nbytes):
        path, ck = sources[name]
        with about(path):
            info = ck.info(name)
            array = ck[name]
        out.add(name, array, compression=_tensor_compression(choice, info))
        del array


def _check_level(args) -> None:
    if args.level is not None and args.compression == "none":
        raise CliError("--level applies to zstd; it cannot be used with --compression none")


# -- subcommands ----------------------------------------------------------------------


def cmd_info(args) -> int:
    with open_input(args.path) as ck, about(args.path):
        infos = [ck.info(n) for n in ck]
        nbytes, stored = ck.nbytes, ck.stored_nbytes
        codecs: dict[str, int] = {}
        dtypes: dict[str, int] = {}
        for i in infos:
            codecs[codec_name(i.compression)] = codecs.get(codec_name(i.compression), 0) + 1
            dtypes[dtype_name(i.dtype)] = dtypes.get(dtype_name(i.dtype), 0) + 1
        summary = {
            "path": os.fspath(args.path),
            "format": getattr(ck, "format", "lazystore"),
            "format_version": ".".join(str(v) for v in ck.format_version),
            "tensors": len(infos),
            "nbytes": nbytes,
            "stored_nbytes": stored,
            "compression_ratio": ratio(nbytes, stored),
            "codecs": codecs,
            "dtypes": dtypes,
            "nested": TREE_KEY in ck.system_metadata,
            "metadata": ck.metadata,
            "system_metadata_keys": sorted(ck.system_metadata),
        }
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0
    r = summary["compression_ratio"]
    rows = [
        ("path", summary["path"]),
        ("format", f"{summary['format']} {summary['format_version']}".strip()),
        ("tensors", str(len(infos))),
        ("total size", f"{human_size(nbytes)} ({nbytes:,} bytes)"),
        ("stored size", f"{human_size(stored)} ({stored:,} bytes)"),
        ("compression", _ratio_text(r, codecs)),
        ("dtypes", ", ".join(f"{n} {d}" for d, n in sorted(dtypes.items())) or "-"),
        ("nested state", "yes (ls.load rebuilds the saved structure)" if summary["nested"] else "no"),
    ]
    width = max(len(k) for k, _ in rows) + 1
    for key, value in rows:
        print(f"{key + ':':<{width}} {value}")
    if summary["metadata"]:
        print("metadata:")
        for line in json.dumps(summary["metadata"], indent=2, ensure_ascii=False).splitlines():
            print("  " + line)
    else:
        print(f"{'metadata:':<{width}} {{}}")
    return 0


def _ratio_text(r: float | None, codecs: dict[str, int]) -> str:
    if r is None:
        return "-"
    counts = ", ".join(f"{n} {c}" for c, n in sorted(codecs.items()))
    return f"{r:.2f}x ({counts})"


def cmd_ls(args) -> int:
    with open_input(args.path) as ck, about(args.path):
        view = ck if args.glob is None else ck.select(args.glob)
        infos = [view.info(n) for n in view]
    if args.glob is not None and not infos:
        print(f"{PROG}: no tensor matches {args.glob!r}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([
            {"name": i.name, "dtype": dtype_name(i.dtype), "shape": list(i.shape), "nbytes": i.nbytes,
             "stored_nbytes": i.stored_nbytes, "compression": i.compression}
            for i in infos
        ], indent=2, ensure_ascii=False))
        return 0
    rows = [("NAME", "DTYPE", "SHAPE", "SIZE", "STORED", "CODEC")]
    rows += [(i.name, dtype_name(i.dtype), format_shape(i.shape), human_size(i.nbytes),
              human_size(i.stored_nbytes), codec_name(i.compression)) for i in infos]
    _print_table(rows, right={3, 4})
    return 0


def _batches(ck: ls.CheckpointView, names: list[str], limit: int) -> Iterator[list[str]]:
    batch, size = [], 0
    for name in names:
        batch.append(name)
        size += ck.info(name).stored_nbytes
        if size >= limit:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def cmd_verify(args) -> int:
    with open_input(args.path) as ck, about(args.path):
        # A view of no tensors verifies just the preamble (which opening a
        # local file has already checked; other sources check it here).
        ck.select([]).verify()
        names = list(ck)
        bad: list[str] = []
        sizes = {n: ck.info(n).stored_nbytes for n in names}
        for batch in progress(_batches(ck, names, VERIFY_BATCH_BYTES), desc="verify",
                              total=sum(sizes.values()), weight=lambda b: sum(sizes[n] for n in b)):
            bad += ck.verify(batch)
    for name in bad:
        print(f"corrupt: {name}")
    if bad:
        print(f"{args.path}: {len(bad)} of {_plural(len(names), 'tensor')} corrupt")
        return 1
    print(f"{args.path}: OK, {_plural(len(names), 'tensor')} intact")
    return 0


def cmd_convert(args) -> int:
    _check_level(args)
    with open_input(args.src, verify=True) as ck:
        with about(args.src):
            metadata, system_metadata = dict(ck.metadata), dict(ck.system_metadata)
        with open_output(args.dst, metadata=metadata, system_metadata=system_metadata,
                         compression_level=args.level, max_shard_size=args.max_shard_size) as out, \
                about(args.dst):
            _copy_tensors(out, {n: (args.src, ck) for n in ck}, args.compression, "convert")
        count, nbytes = len(ck), ck.nbytes
    print(f"{args.dst}: {_plural(count, 'tensor')}, {human_size(nbytes)} -> {_stored_size(args.dst)}")
    return 0


def _stored_size(path) -> str:
    try:
        if os.path.isdir(path):
            size = sum(e.stat().st_size for e in os.scandir(path) if e.is_file())
            return f"{human_size(size)} on disk"
        return f"{human_size(os.path.getsize(path))} on disk"
    except OSError:
        return "written"


def _merge_dicts(dicts: list[Mapping], prefer: str) -> dict:
    merged: dict = {}
    for d in (dicts if prefer == "last" else reversed(dicts)):
        merged.update(d)
    if prefer == "first":  # keep keys in order of first appearance
        order = {k: None for d in dicts for k in d}
        merged = {k: merged[k] for k in order}
    return merged


def cmd_merge(args) -> int:
    _check_level(args)
    with contextlib.ExitStack() as stack:
        views = [(p, stack.enter_context(open_input(p, verify=True))) for p in args.inputs]
        sources: dict[str, tuple[str, ls.CheckpointView]] = {}
        duplicates = 0
        for path, ck in views:
            with about(path):
                if TREE_KEY in ck.system_metadata:
                    raise CliError(f"{path}: holds nested training state, whose structure a merge would "
                                   "break; merge takes flat checkpoints (name -> tensor)")
                for name in ck:
                    if name in sources:
                        duplicates += 1
                        if args.prefer == "first":
                            continue
                    sources[name] = (path, ck)
        metadata = _merge_dicts([ck.metadata for _, ck in views], args.prefer)
        system_metadata = _merge_dicts([ck.system_metadata for _, ck in views], args.prefer)
        with open_output(args.out, metadata=metadata, system_metadata=system_metadata,
                         compression_level=args.level, max_shard_size=None) as out, about(args.out):
            _copy_tensors(out, sources, args.compression, "merge")
    note = f", {_plural(duplicates, 'duplicate name')} (kept the {args.prefer})" if duplicates else ""
    print(f"{args.out}: {_plural(len(sources), 'tensor')} from {_plural(len(views), 'input')}{note}, "
          f"{_stored_size(args.out)}")
    return 0


# -- diff -----------------------------------------------------------------------------


def blocks(shape: tuple[int, ...], itemsize: int, limit: int) -> Iterator[tuple]:
    """Indexes that cover a C-order tensor in contiguous blocks of at most
    ``limit`` bytes (or one row of its last axis, if that is larger)."""
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    row = math.prod(shape[1:]) * itemsize
    if row <= limit or len(shape) == 1:
        step = max(1, limit // row)
        for i in range(0, shape[0], step):
            yield (slice(i, min(i + step, shape[0])),)
        return
    for i in range(shape[0]):
        for rest in blocks(shape[1:], itemsize, limit):
            yield (slice(i, i + 1),) + rest


def _flat_bits(x: np.ndarray) -> np.ndarray:
    """One unsigned integer per element (two for 16-byte elements) holding its bits."""
    flat = np.ascontiguousarray(x).reshape(-1)
    size = flat.dtype.itemsize
    if size in (1, 2, 4, 8):
        return flat.view(f"<u{size}")
    return flat.view("<u8").reshape(len(flat), size // 8)


class ValueDiff:
    """Accumulates, block by block, how two same-typed tensors differ."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype
        self.differing = 0
        self.max_abs: float | int = 0 if dtype.kind in "biu" else 0.0
        self.one_sided_nan = False

    def add(self, a: np.ndarray, b: np.ndarray) -> None:
        ba, bb = _flat_bits(a), _flat_bits(b)
        neq = ba != bb
        if neq.ndim == 2:
            neq = neq.any(axis=1)
        n = int(np.count_nonzero(neq))
        if not n:
            return
        self.differing += n
        va = np.ascontiguousarray(a).reshape(-1)[neq]
        vb = np.ascontiguousarray(b).reshape(-1)[neq]
        self.max_abs = max(self.max_abs, self._max_abs(va, vb))

    def _max_abs(self, a: np.ndarray, b: np.ndarray):
        dt = self.dtype
        if dt.kind == "b":
            return 1
        if dt.kind in "iu":
            # Exact in uint64: |a - b| < 2**64 and uint64 arithmetic wraps mod 2**64.
            wide = np.int64 if dt.kind == "i" else np.uint64
            a, b = a.astype(wide), b.astype(wide)
            hi, lo = np.maximum(a, b), np.minimum(a, b)
            return int((hi.view(np.uint64) - lo.view(np.uint64)).max())
        wide = np.complex128 if dt.kind == "c" else np.float64
        a, b = a.astype(wide), b.astype(wide)
        both_nan = np.isnan(a) & np.isnan(b)
        with np.errstate(invalid="ignore", over="ignore"):
            d = np.where((a == b) | both_nan, 0.0, np.abs(a - b))
        if np.isnan(d).any():
            self.one_sided_nan = True
            d = d[~np.isnan(d)]
        return float(d.max()) if len(d) else 0.0

    def describe(self, size: int) -> str:
        m = self.max_abs
        text = f"{self.differing:,} of {size:,} elements differ, max abs diff "
        text += f"{m:.6g}" if isinstance(m, float) else str(m)
        if self.one_sided_nan:
            text += " (and NaN in one file only)"
        return text


def _compare_tensor(a_path, sa, b_path, sb, info: ls.TensorInfo) -> ValueDiff:
    diff = ValueDiff(np.dtype(info.dtype))
    for idx in blocks(info.shape, info.dtype.itemsize, DIFF_BLOCK_BYTES):
        with about(a_path):
            xa = np.asarray(sa[idx])
        with about(b_path):
            xb = np.asarray(sb[idx])
        diff.add(xa, xb)
    return diff


def _diff_dicts(label: str, a: Mapping, b: Mapping, lines: list[str]) -> int:
    """Metadata differences; values compare as JSON, so 1, 1.0 and true differ."""
    before = len(lines)
    for key in a:
        if key not in b:
            lines.append(f"- {label} {key}: {_short_json(a[key])}")
    for key in b:
        if key not in a:
            lines.append(f"+ {label} {key}: {_short_json(b[key])}")
    for key in a:
        if key in b and _short_json(a[key], math.inf) != _short_json(b[key], math.inf):
            lines.append(f"~ {label} {key}: {_short_json(a[key])} -> {_short_json(b[key])}")
    return len(lines) - before


def _tensor_line(mark: str, info: ls.TensorInfo) -> str:
    return f"{mark} {info.name}  {dtype_name(info.dtype)} {format_shape(info.shape)}"


def cmd_diff(args) -> int:
    lines: list[str] = []
    with open_input(args.a, verify=True) as ca, open_input(args.b, verify=True) as cb:
        with about(args.a):
            names_a, meta_a, sys_a = list(ca), ca.metadata, ca.system_metadata
        with about(args.b):
            names_b, meta_b, sys_b = list(cb), cb.metadata, cb.system_metadata
        in_a, in_b = set(names_a), set(names_b)
        removed = [ca.info(n) for n in names_a if n not in in_b]
        added = [cb.info(n) for n in names_b if n not in in_a]
        retyped, common = [], []
        for name in names_a:
            if name in in_b:
                ia, ib = ca.info(name), cb.info(name)
                (common if (ia.dtype, ia.shape) == (ib.dtype, ib.shape) else retyped).append((ia, ib))
        lines += [_tensor_line("-", i) for i in removed]
        lines += [_tensor_line("+", i) for i in added]
        lines += [f"~ {ia.name}  {dtype_name(ia.dtype)} {format_shape(ia.shape)} -> "
                  f"{dtype_name(ib.dtype)} {format_shape(ib.shape)}" for ia, ib in retyped]
        changed = 0
        for info, _ in progress(common, desc="diff", total=sum(i.nbytes for i, _ in common),
                                weight=lambda pair: pair[0].nbytes):
            with about(args.a):
                sa = ca.get_slice(info.name)
            with about(args.b):
                sb = cb.get_slice(info.name)
            d = _compare_tensor(args.a, sa, args.b, sb, info)
            if d.differing:
                changed += 1
                lines.append(f"~ {info.name}  values: {d.describe(info.size)}")
        meta = _diff_dicts("metadata", meta_a, meta_b, lines)
        meta += _diff_dicts("lazystore metadata", sys_a, sys_b, lines)
    if not lines:
        print(f"same: {_plural(len(names_a), 'tensor')} with identical values, same metadata")
        return 0
    print(f"--- {args.a}")
    print(f"+++ {args.b}")
    for line in lines:
        print(line)
    counts = [f"{len(removed)} removed", f"{len(added)} added", f"{len(retyped)} changed dtype or shape",
              f"{changed} changed values", _plural(meta, "metadata difference")]
    print("different: " + ", ".join(c for c in counts if not c.startswith("0 ")))
    return 1


# -- entry point ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect, check, convert, compare and merge lazystore checkpoints.",
        epilog="Exit codes: 0 success; 1 corrupt (verify), different (diff), no match (ls); 2 errors. "
               "See docs/cli.md.",
    )
    p.add_argument("--version", action="version",
                   version=f"{PROG} {ls.__version__} (format {ls.FORMAT_VERSION})")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("info", help="format, version, sizes, compression ratio and metadata of a checkpoint",
                       description="Show a checkpoint's format and version, tensor count, total and stored "
                                   "bytes, compression ratio and metadata. Reads only the index.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("ls", help="list tensors: name, dtype, shape, size, codec",
                       description="List each tensor: name, dtype, shape, size, stored size, codec. "
                                   "Exit code 1 if GLOB matches nothing.")
    s.add_argument("path", metavar="PATH")
    s.add_argument("glob", metavar="GLOB", nargs="?",
                   help="only names matching this shell pattern ('*' also matches '/' and '.')")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_ls)

    s = sub.add_parser("verify", help="check every stored byte against its checksum",
                       description="Check the preamble, every chunk and all padding against their "
                                   "checksums, naming every corrupt tensor. "
                                   "Exit codes: 0 intact, 1 corrupt, 2 unreadable.")
    s.add_argument("path", metavar="PATH")
    s.set_defaults(func=cmd_verify)

    def encoding_options(s):
        s.add_argument("--compression", choices=["zstd", "none"], default=None,
                       help="re-encode every tensor with zstd or raw (default: keep each tensor's codec)")
        s.add_argument("--level", type=_level_arg, metavar="N", default=None,
                       help="zstd level 1-22 for the zstd tensors (default: tuned per dtype)")

    s = sub.add_parser("convert", help="convert a checkpoint (re-encode with or without compression)",
                       description="Copy SRC to DST one tensor at a time, keeping metadata and any "
                                   "nested training state. SRC may be lazystore, safetensors, a sharded "
                                   "folder, a torch zip (.pt/.pth/.bin, loaded with weights_only=True) or "
                                   ".npz. The output format follows DST: .safetensors, a folder (or "
                                   "--max-shard-size) for lazystore shards, lazystore otherwise. "
                                   "Corrupt input stops the copy.")
    s.add_argument("src", metavar="SRC")
    s.add_argument("dst", metavar="DST")
    encoding_options(s)
    s.add_argument("--max-shard-size", type=_size_arg, metavar="SIZE", default=None,
                   help="write DST as a folder of lazystore shards of at most SIZE each (e.g. 500MB, 2GiB) "
                        "plus lazystore.index.json")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("diff", help="compare two checkpoints: keys, dtypes, shapes, values, metadata",
                       description="Report added, removed and changed tensors (dtype or shape), tensors "
                                   "whose values differ (bitwise) with the max abs difference, and "
                                   "metadata differences. Tensors are read in blocks, so memory stays "
                                   "bounded. Exit codes: 0 same, 1 different, 2 unreadable.")
    s.add_argument("a", metavar="A")
    s.add_argument("b", metavar="B")
    s.set_defaults(func=cmd_diff)

    s = sub.add_parser("merge", help="combine checkpoints into one",
                       description="Write the tensors of every input into OUT, one at a time. A name "
                                   "in several inputs is taken from the first (or, with --prefer last, "
                                   "the last) input holding it; metadata keys are merged the same way. "
                                   "Checkpoints of nested training state cannot be merged.")
    s.add_argument("out", metavar="OUT")
    s.add_argument("inputs", metavar="IN", nargs="+")
    s.add_argument("--prefer", choices=["first", "last"], default="first",
                   help="which input wins for a tensor or metadata key found in several (default: first)")
    encoding_options(s)
    s.set_defaults(func=cmd_merge)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return args.func(args)
    except CliError as exc:
        return _fail(str(exc))
    except ls.LazyStoreError as exc:
        return _fail(_one_line(str(exc)) or type(exc).__name__)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # `lazystore ls x | head`
            _silence_stdout()
            return 1
        return _fail(_os_error(exc, None))
    except MemoryError:
        return _fail("out of memory")
    except KeyboardInterrupt:
        return _fail("interrupted", 130)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr)
    return code


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _os_error(exc: OSError, path) -> str:
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or _one_line(str(exc))
    if where is not None and reason in ("", os.fspath(where)):
        # Some filesystems (fsspec's HTTP, say) put only the path in the
        # message; the reason is in the error's type and its cause.
        reason = type(exc).__name__
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause):
            reason += f": {_one_line(str(cause))}"
    if exc.filename is None and where is not None and os.path.isdir(where):
        reason = "is a folder, not a checkpoint file"
    return f"{where}: {reason}" if where is not None else reason


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
