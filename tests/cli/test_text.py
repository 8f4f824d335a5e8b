"""lazystore.cli.text: sizes, shapes and dtype names as the command writes them,
and --max-shard-size sizes read back."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

from lazystore.cli.text import dtype_name, escape_controls, format_shape, human_size, parse_size


def test_human_size():
    assert human_size(0) == "0 B"
    assert human_size(1023) == "1023 B"
    assert human_size(4096) == "4.0 KiB"
    assert human_size(4 << 20) == "4.0 MiB"
    assert human_size(3 << 29) == "1.5 GiB"


def test_format_shape_and_dtype_name():
    assert format_shape((2048, 1024)) == "(2048, 1024)"
    assert format_shape((5,)) == "(5,)"
    assert format_shape(()) == "()"
    assert dtype_name(np.dtype(">f4")) == "float32"
    assert dtype_name(ml_dtypes.bfloat16) == "bfloat16"


@pytest.mark.parametrize("text, n", [("123", 123), ("500MB", 500 * 10**6), ("2GiB", 2 << 30),
                                     ("1.5 GB", 1_500_000_000), ("64kib", 65536), ("10B", 10)])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "0", "2G", "5 XB", "-1MB", "MB", "1e9"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("digits", [20, 400])
def test_parse_size_refuses_sizes_larger_than_any_file(digits):
    with pytest.raises(ValueError, match="larger than any file"):
        parse_size("9" * digits)
    assert parse_size("1.1GB") == 1_100_000_000  # exact: no float rounding
    assert parse_size(str(2**63 - 1)) == 2**63 - 1


HOSTILE = {
    "ansi colour": "a\x1b[31mred",
    "title (OSC, BEL)": "k\x1b]0;owned\x07",
    "C1 CSI": "c\x9b2J",
    "DEL": "d\x7f",
    "bidi override": "evil\u202etxt.exe",
    "zero width": "a\u200bb",
    "tag character": "t\U000e0041",
    "carriage return": "over\rwrite",
    "tab": "a\tb",
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE)
def test_escape_controls_leaves_only_printable_text(text):
    escaped = escape_controls(text)
    assert escaped.isprintable() and escaped != text
    assert json.loads(f'"{escaped}"') == text  # the escapes are JSON's: nothing is lost
    assert escape_controls(escaped) == escaped


def test_escape_controls_keeps_readable_text_and_newlines():
    text = "layers.0/weight é 中文 ok\nsecond line"
    assert escape_controls(text) == text
