"""``lazystore diff``: compare two checkpoints tensor by tensor, by name.

Names, dtypes, shapes and metadata come from the indexes; values are
compared bit for bit (so a file and its recompressed copy are the same), a
block at a time (:func:`lazystore._core.blocks.blocks`), so memory stays bounded however large the
tensors. :class:`ValueDiff` sums up how two tensors' values differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

import lazystore as ls
from lazystore._core import frameworks, ties
from lazystore._core.blocks import blocks
from lazystore.cli.errors import about
from lazystore.cli.inputs import open_input
from lazystore.cli.progress import progress
from lazystore.cli.text import dtype_name, format_shape, one_value, plural, short_json
from lazystore.views.tree import TREE_KEY, looked_through

# diff reads tensors in blocks of about this many bytes per file.
DIFF_BLOCK_BYTES = 16 << 20


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
            exact = np.int64 if dt.kind == "i" else np.uint64
            a, b = a.astype(exact), b.astype(exact)
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
            lines.append(f"- {label} {one_value(key)}: {short_json(a[key])}")
    for key in b:
        if key not in a:
            lines.append(f"+ {label} {one_value(key)}: {short_json(b[key])}")
    for key in a:
        if key in b and short_json(a[key], None) != short_json(b[key], None):
            lines.append(f"~ {label} {one_value(key)}: {short_json(a[key])} -> {short_json(b[key])}")
    return len(lines) - before


def _tensor_line(mark: str, info: ls.TensorInfo) -> str:
    return f"{mark} {one_value(info.name)}  {dtype_name(info.dtype)} {format_shape(info.shape)}"


class _Compared:
    """A checkpoint as diff sees it: the same tensors are the same checkpoint
    however they were saved. A name stored as an alias of another's tensor
    (tied weights in a lazystore file) is that tensor, as it is whole in a
    safetensors file; a state_dict an older version saved as a tree around
    a flat dict is the flat checkpoint it holds; and ``{"format": "pt"}``
    in the metadata means what lazystore's torch mark does."""

    def __init__(self, ck):
        stored = list(ck)
        self._ck = ck
        self._aliases = ties.read_aliases(ck.system_metadata, stored)
        self.names = stored + [a for a in self._aliases if a not in stored]
        self.metadata, system = looked_through(ck.metadata, ck.system_metadata)
        if TREE_KEY not in system and frameworks.saved_from_torch(self.metadata, system):
            # {"format": "pt"} (a file from transformers) says what lazystore's own mark does
            system[frameworks.FRAMEWORK_KEY] = frameworks.TORCH
            if self.metadata.get(frameworks.FORMAT_KEY) == frameworks.TORCH_FORMAT:
                del self.metadata[frameworks.FORMAT_KEY]
        self.system_metadata = {k: v for k, v in system.items() if k != ties.KEY}

    def info(self, name: str) -> ls.TensorInfo:
        return dataclasses.replace(self._ck.info(self._aliases.get(name, name)), name=name)

    def get_slice(self, name: str):
        return self._ck.get_slice(self._aliases.get(name, name))


def cmd_diff(args) -> int:
    lines: list[str] = []
    with open_input(args.a, verify=True, stream=True) as view_a, \
            open_input(args.b, verify=True, stream=True) as view_b:
        with about(args.a):
            ca = _Compared(view_a)
        with about(args.b):
            cb = _Compared(view_b)
        names_a, meta_a, sys_a = ca.names, ca.metadata, ca.system_metadata
        names_b, meta_b, sys_b = cb.names, cb.metadata, cb.system_metadata
        in_a, in_b = set(names_a), set(names_b)
        removed = [ca.info(n) for n in names_a if n not in in_b]
        added = [cb.info(n) for n in names_b if n not in in_a]
        retyped: list[tuple[ls.TensorInfo, ls.TensorInfo]] = []
        common: list[tuple[ls.TensorInfo, ls.TensorInfo]] = []
        for name in names_a:
            if name in in_b:
                ia, ib = ca.info(name), cb.info(name)
                (common if (ia.dtype, ia.shape) == (ib.dtype, ib.shape) else retyped).append((ia, ib))
        lines += [_tensor_line("-", i) for i in removed]
        lines += [_tensor_line("+", i) for i in added]
        lines += [f"~ {one_value(ia.name)}  {dtype_name(ia.dtype)} {format_shape(ia.shape)} -> "
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
                lines.append(f"~ {one_value(info.name)}  values: {d.describe(info.size)}")
        meta = _diff_dicts("metadata", meta_a, meta_b, lines)
        meta += _diff_dicts("lazystore metadata", sys_a, sys_b, lines)
    if not lines:
        print(f"same: {plural(len(names_a), 'tensor')} with identical values, same metadata")
        return 0
    print(f"--- {one_value(args.a)}")
    print(f"+++ {one_value(args.b)}")
    for line in lines:
        print(line)
    counts = [f"{len(removed)} removed", f"{len(added)} added", f"{len(retyped)} changed dtype or shape",
              f"{changed} changed values", plural(meta, "metadata difference")]
    print("different: " + ", ".join(c for c in counts if not c.startswith("0 ")))
    return 1
