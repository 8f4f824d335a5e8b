"""KeyTable: lookups by searching the key text agree with the built table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lazystore as ls
from lazystore._core.keys import SEARCHES_BEFORE_TABLE, KeyTable
from tests.hypothesis_profiles import examples

names_strategy = st.lists(st.text(st.characters(blacklist_characters="\0"), max_size=6), max_size=12)


def table(names: list[str]) -> KeyTable:
    return KeyTable("".join(n + "\0" for n in names), len(names))


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(names=names_strategy, probes=st.lists(st.text(max_size=6), max_size=20))
def test_every_lookup_agrees_with_the_list(names, probes):
    t = table(names)
    unique = len(set(names)) == len(names)
    # Before and after the table is built (more lookups than searches).
    for name in (names + probes) * 2:
        if name in names and names.count(name) > 1:
            with pytest.raises(ls.FormatError, match="duplicate key"):
                t[name]
        elif name in names:
            assert t[name] == names.index(name)
            assert t.name(names.index(name)) == name
        else:
            with pytest.raises(KeyError):
                t[name]
    assert len(t) == len(names)
    if unique:
        assert list(t) == names
    else:
        with pytest.raises(ls.FormatError, match="duplicate key"):
            list(t)


def test_names_that_contain_each_other_are_told_apart():
    names = ["a", "ba", "a.b", "", "b", "a\u00e9", "é"]
    t = table(names)
    for pos, name in enumerate(names):
        assert t[name] == pos
    assert t._positions is None  # all answered by searching the text


def test_the_table_is_built_after_a_few_searches():
    names = [f"layer.{i}" for i in range(100)]
    t = table(names)
    for i in range(SEARCHES_BEFORE_TABLE + 3):
        assert t[f"layer.{i}"] == i
    assert t._positions is not None


@pytest.mark.parametrize("bad", [None, 3, b"a", ("a",), "a\0b"])
def test_lookups_of_non_names_are_key_errors(bad):
    t = table(["a", "b"])
    with pytest.raises(KeyError):
        t[bad]
    assert bad not in t
