"""The bounds on every JSON text lazystore parses (lazystore/_core/strict_json.py).

Parsed JSON costs far more memory than its text (a list of empty lists: ~22x),
so a text is refused by its size and by the values it holds before it is parsed.
The tests shrink the bounds to test the mechanism on small texts; one checks
that the real bounds are those docs/format.md states.
"""

import re

import pytest

from lazystore._core import strict_json
from tests.paths import FORMAT_SPEC


@pytest.fixture
def small_bounds(monkeypatch):
    monkeypatch.setattr(strict_json, "MAX_VALUES", 100)
    monkeypatch.setattr(strict_json, "MAX_BYTES", 10_000)


def test_the_bounds_are_the_ones_the_format_states():
    spec = FORMAT_SPEC.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(MAX_METADATA_\w+)` \| 2\^(\d+)", spec, re.MULTILINE))
    assert rows == {"MAX_METADATA_BYTES": "27", "MAX_METADATA_VALUES": "24"}
    assert strict_json.MAX_BYTES == 2**27 and strict_json.MAX_VALUES == 2**24


@pytest.mark.parametrize("as_text", [False, True], ids=["bytes", "str"])
def test_a_text_with_more_values_than_the_bound_is_refused_before_parsing(small_bounds, as_text):
    at_bound = "[" + ",".join(["0"] * 99) + "]"  # 1 + 1 '[' + 98 ',' = 100 counted
    over = "[" + ",".join(["0"] * 100) + "]"
    convert = str if as_text else str.encode
    assert strict_json.loads(convert(at_bound)) == [0] * 99
    with pytest.raises(strict_json.TooLarge, match="more than the 100 JSON values"):
        strict_json.loads(convert(over))
    with pytest.raises(strict_json.TooLarge):
        strict_json.loads(convert('{"a":[' + "{}," * 50 + "{}]}"))  # 1 + 3 + 51 "{" + 50 ",": names, objects count


def test_the_count_is_of_separator_bytes_anywhere(small_bounds):
    # The documented rule: 1 + the ',' ':' '[' '{' bytes, strings included, so
    # that every reader and writer count alike without parsing.
    text = '{"csv":"' + "a,b" * 98 + '"}'  # 1 + '{' + ':' + 98 ',' = 101
    assert strict_json.values_at_most(text) == strict_json.values_at_most(text.encode()) == 101
    with pytest.raises(strict_json.TooLarge):
        strict_json.loads(text)
    assert strict_json.loads(text.replace("a,b", "a;b", 1)) == {"csv": "a;b" + "a,b" * 97}


def test_a_text_longer_than_the_bound_is_refused(small_bounds):
    with pytest.raises(strict_json.TooLarge, match="10001 bytes"):
        strict_json.loads(b'"' + b"x" * 9999 + b'"')
    assert strict_json.loads(b'"' + b"x" * 9998 + b'"') == "x" * 9998


def test_too_large_is_a_value_error():
    # Every caller already turns ValueError into a FormatError naming what it read.
    assert issubclass(strict_json.TooLarge, ValueError)
