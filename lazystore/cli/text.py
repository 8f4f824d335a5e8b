"""How the command line writes values for people, and reads sizes back.

Sizes, shapes, dtype and codec names, counts, ratios, short JSON and aligned
tables for standard output, plus :func:`parse_size` for ``--max-shard-size``,
and :func:`escape_controls`, which everything the command writes passes
through. Pure functions of their arguments: nothing here opens a file.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Sequence

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


def _escape(char: str) -> str:
    # JSON's escape (UTF-16 pairs beyond the BMP): it reads the same to a
    # person, and keeps --json output valid JSON with the same strings.
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def escape_controls(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every character a terminal could act on, or that hides
    what is around it, written as a ``\\uXXXX`` escape instead: control
    characters (ESC, BEL, C1's CSI...), bidirectional overrides, zero-width
    and other invisible ones (what ``str.isprintable`` refuses).

    Newlines stay unless ``keep_newlines=False``: standard output passes
    through this whole (they separate its lines there), and a value that
    must stay on its line (a name in a table, after "corrupt:") is escaped
    with :func:`one_value` first."""
    if text.isprintable():
        return text  # nearly always: one C-level scan
    if not keep_newlines:
        return "".join(c if c.isprintable() else _escape(c) for c in text)
    return "\n".join(escape_controls(line, keep_newlines=False) for line in text.split("\n"))


def one_value(text) -> str:
    """A name or path from a file or the command line, for one line of
    output: every control character escaped, newlines included, so that a
    name cannot start a line of its own ("x.lzy: OK")."""
    return escape_controls(str(text), keep_newlines=False)


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
    if m is None or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"invalid size {_shown(text)}: use bytes or a unit such as 500MB, 2GiB")
    unit = m.group(2).lower()
    # Decimal, not float: exact for "1.1GB", and no overflow to infinity
    # (int(inf) raised OverflowError, a traceback) for a 400-digit number.
    n = int(decimal.Decimal(m.group(1)) * _SIZE_UNITS[unit])
    if n <= 0:
        raise ValueError(f"invalid size {_shown(text)}: must be positive")
    if n > MAX_SIZE:
        raise ValueError(f"invalid size {_shown(text)}: more than 2**63 - 1 bytes, larger than any file")
    return n


# Sizes are file offsets: no file is larger.
MAX_SIZE = 2**63 - 1


def _shown(text: str, limit: int = 40) -> str:
    """``text`` for an error line: a 400-digit argument is cut, not echoed whole."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def short_json(value, limit: int | None = 60) -> str:
    """``value`` as JSON with sorted keys, cut to ``limit`` characters ending
    in "..." (None: the whole text)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if limit is None or len(text) <= limit else text[: limit - 3] + "..."


def print_table(rows: Sequence[tuple[str, ...]], right: set[int]) -> None:
    """Print ``rows`` in columns two spaces apart; the columns numbered in
    ``right`` are right-aligned (numbers), the others left-aligned."""
    rows = [tuple(one_value(c) for c in row) for row in rows]  # measured as they will print
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))]
        print("  ".join(cells).rstrip())
