"""lazystore.cli.text: sizes, shapes and dtype names as the command writes them,
and --max-shard-size sizes read back."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from lazystore.cli.text import dtype_name, format_shape, human_size, parse_size


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
