"""How the command line writes values for people, and reads sizes back.

Sizes, shapes, dtype and codec names, counts, ratios, short JSON and aligned
tables for standard output, plus :func:`parse_size` for ``--max-shard-size``.
Pure functions of their arguments: nothing here opens a file.
"""

from __future__ import annotations

import json
import re

import numpy as np

import lazystore as ls

# The command's name: argparse's prog, and the start of every line it writes
# on stderr.
PROG = "lazystore"

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
    """A tensor's codec as ls and info name it: "raw" for no compression."""
    return compression or "raw"


def plural(n: int, noun: str) -> str:
    """A count and its noun: "1 tensor", "2 tensors"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ratio(nbytes: int, stored_nbytes: int) -> float | None:
    """The compression ratio, None for a checkpoint that stores no bytes."""
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


def short_json(value, limit: int = 60) -> str:
    """``value`` as JSON with sorted keys, cut to ``limit`` characters ending
    in "..." (pass ``math.inf`` for the whole text)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def print_table(rows: list[tuple[str, ...]], right: set[int]) -> None:
    """Print ``rows`` in columns two spaces apart; the columns numbered in
    ``right`` are right-aligned (numbers), the others left-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
