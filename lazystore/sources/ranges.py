"""Coalescing byte ranges into fewer, larger requests.

A remote read costs a round trip whatever its size, so ranges that touch or
nearly touch are fetched as one request and cut apart afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence


def coalesce(ranges: Sequence[tuple[int, int]], *, max_gap: int, max_size: int) -> list[tuple[int, int, list[int]]]:
    """Group ``(start, stop)`` byte ranges into requests.

    Returns ``(start, stop, members)`` sorted by start: ``members`` are the
    indexes (into ``ranges``) of the ranges that ``[start, stop)`` covers.
    A range joins the request before it when it starts at most ``max_gap``
    bytes after that request ends and the request stays within ``max_size``
    bytes; a range that overlaps the request joins it whatever the size, so
    requests never overlap and no byte is fetched twice. Ranges are never
    split: one longer than ``max_size`` is a request of its own. Every byte
    of a request belongs to a member or to a gap of at most ``max_gap``
    bytes. Empty ranges join whatever request holds their position.
    """
    if max_gap < 0 or max_size < 1:
        raise ValueError(f"need max_gap >= 0 and max_size >= 1, got {max_gap} and {max_size}")
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i][0], ranges[i][1]))
    groups: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, stop = ranges[i]
        if not 0 <= start <= stop:
            raise ValueError(f"bad byte range {start}-{stop}")
        if groups:
            g_start, g_stop, members = groups[-1]
            new_stop = max(g_stop, stop)
            if start < g_stop or (start <= g_stop + max_gap and new_stop - g_start <= max_size):
                groups[-1] = (g_start, new_stop, members)
                members.append(i)
                continue
        groups.append((start, stop, [i]))
    return groups
