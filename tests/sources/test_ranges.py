"""coalesce(): grouping byte ranges into few requests, on its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lazystore.sources import ByteSource
from lazystore.sources.ranges import coalesce
from tests.hypothesis_profiles import examples


def groups(ranges, max_gap=0, max_size=1 << 30):
    return [(a, b, sorted(m)) for a, b, m in coalesce(ranges, max_gap=max_gap, max_size=max_size)]


def test_adjacent_ranges_merge():
    assert groups([(0, 10), (10, 20), (20, 25)]) == [(0, 25, [0, 1, 2])]


def test_a_gap_within_max_gap_merges_and_a_wider_one_does_not():
    assert groups([(0, 10), (14, 20)], max_gap=4) == [(0, 20, [0, 1])]
    assert groups([(0, 10), (15, 20)], max_gap=4) == [(0, 10, [0]), (15, 20, [1])]


def test_order_of_the_input_does_not_matter_and_members_index_it():
    assert groups([(20, 30), (0, 10), (10, 20)]) == [(0, 30, [0, 1, 2])]
    assert groups([(100, 110), (0, 10)]) == [(0, 10, [1]), (100, 110, [0])]


def test_max_size_caps_a_merge_but_never_splits_a_range():
    assert groups([(0, 10), (10, 20), (20, 30)], max_size=20) == [(0, 20, [0, 1]), (20, 30, [2])]
    assert groups([(0, 100), (100, 110)], max_size=20) == [(0, 100, [0]), (100, 110, [1])]


def test_overlapping_repeated_and_contained_ranges_share_a_request():
    assert groups([(0, 10), (5, 15), (0, 10), (2, 3)], max_size=15) == [(0, 15, [0, 1, 2, 3])]
    # Even past max_size: requests never overlap, so no byte is fetched twice.
    assert groups([(0, 10), (5, 15)], max_size=10) == [(0, 15, [0, 1])]
    # A range inside the request so far adds nothing to its size.
    assert groups([(0, 20), (5, 10)], max_size=20) == [(0, 20, [0, 1])]


def test_empty_ranges_and_empty_input():
    assert groups([]) == []
    assert groups([(5, 5)]) == [(5, 5, [0])]
    assert groups([(0, 10), (10, 10)]) == [(0, 10, [0, 1])]


@pytest.mark.parametrize("bad", [[(5, 4)], [(-1, 3)]])
def test_bad_ranges_are_refused(bad):
    with pytest.raises(ValueError):
        coalesce(bad, max_gap=0, max_size=10)


def test_bad_limits_are_refused():
    with pytest.raises(ValueError):
        coalesce([(0, 1)], max_gap=-1, max_size=10)
    with pytest.raises(ValueError):
        coalesce([(0, 1)], max_gap=0, max_size=0)


ranges = st.lists(
    st.tuples(st.integers(0, 2000), st.integers(0, 300)).map(lambda t: (t[0], t[0] + t[1])), max_size=40
)


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(ranges, st.integers(0, 100), st.integers(1, 800))
def test_properties(rs, max_gap, max_size):
    out = coalesce(rs, max_gap=max_gap, max_size=max_size)
    # Every range is a member of exactly one request, which covers it.
    members = sorted(i for _, _, m in out for i in m)
    assert members == list(range(len(rs)))
    for start, stop, m in out:
        assert all(start <= rs[i][0] and rs[i][1] <= stop for i in m)
        # The request is as tight as its members...
        assert start == min(rs[i][0] for i in m) and stop == max(rs[i][1] for i in m)
        # ...and no byte of it lies more than max_gap away from a member's bytes...
        covered = sorted((rs[i][0], rs[i][1]) for i in m)
        reach, overlapped = covered[0][1], False
        for a, b in covered[1:]:
            assert a - reach <= max_gap
            overlapped |= a < reach
            reach = max(reach, b)
        # ...and within max_size, unless one member alone is larger or overlaps forced it.
        assert stop - start <= max(max_size, max(rs[i][1] - rs[i][0] for i in m)) or overlapped
    # Requests are sorted and never overlap.
    assert all(a[1] <= b[0] for a, b in zip(out, out[1:]))


class Bytes(ByteSource):
    def __init__(self, data: bytes):
        self._data, self.size, self.name = data, len(data), "<bytes>"

    def read_into(self, offset, out):
        out = memoryview(out).cast("B")
        out[:] = self._data[offset : offset + len(out)]


def test_read_many_default_is_one_read_each_in_order():
    src = Bytes(bytes(range(100)))
    got = src.read_many([(10, 12), (0, 3), (50, 50)])
    assert [bytes(b) for b in got] == [bytes([10, 11]), bytes([0, 1, 2]), b""]
