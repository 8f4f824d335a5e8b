"""Range requests: coalescing byte ranges into fewer, larger requests, and
the answers that are not the range asked for.

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


class WrongAnswer(Exception):
    """An answer to a range request that is not the bytes asked for: cut
    short, of another range, or the whole object. It is never used as data.
    ``range_ignored``: the server sent the whole object, so it ignores
    ``Range``, which asking again will not mend."""

    def __init__(self, message: str, *, range_ignored: bool = False):
        super().__init__(message)
        self.range_ignored = range_ignored


def wrong_length(got: int, start: int, stop: int, size: int | None = None) -> WrongAnswer:
    """The WrongAnswer of ``got`` bytes for a request of bytes [start, stop)
    of an object of ``size`` bytes (when known): the whole object, if it is
    that, is a server ignoring Range."""
    if size is not None and got == size > stop - start:
        return WrongAnswer(f"the whole object ({got} bytes) came back for a request of bytes {start}-{stop}",
                           range_ignored=True)
    return WrongAnswer(f"{got} bytes came back for a request of {stop - start}")
