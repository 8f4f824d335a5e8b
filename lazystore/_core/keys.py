"""Tensor names: which position in the index each name has.

The index stores its keys as one UTF-8 text, each key followed by NUL.
Opening a file checks that text as a whole (rules K1, K2) but builds no
per-name objects: a file of 100,000 tensors would otherwise make 100,000
strings and a dict before the first read. The first few lookups search the
text instead (a few C-level scans); listing the names, or more lookups,
builds the name list and the dict once, and checks that no two keys are
equal (rule K3). A lookup that finds a key also checks that the key occurs
only once, so a duplicated name is refused before it is used
(docs/format.md §13.1 step 5).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping

from lazystore.errors import FormatError

# After this many lookups by search, the table is built: searching costs a
# pass over the text, the table one pass in all.
SEARCHES_BEFORE_TABLE = 8


class KeyTable(Mapping):
    """A read-only mapping of tensor names to their positions in the index."""

    def __init__(self, text: str, count: int):
        """``text`` holds ``count`` keys, each followed by NUL; rules K1 and
        K2 are the caller's (see :func:`lazystore._native.index._decode_keys`)."""
        # A leading NUL puts every key between two NULs, so "\0name\0"
        # matches whole keys only.
        self._text = "\0" + text
        self._count = count
        self._names: list[str] | None = None
        self._positions: dict[str, int] | None = None
        self._found: dict[int, str] = {}  # positions searched for, and their names
        self._duplicates: set[str] = set()  # names held by more than one key
        self._searches = 0

    @classmethod
    def of(cls, names: list[str]) -> KeyTable:
        """The table of names another format's parser has read (checked at once)."""
        table = cls("", len(names))
        table._names = list(names)
        table.positions  # noqa: B018 - builds the table, raising on duplicates
        return table

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return iter(self.positions)

    def __getitem__(self, name) -> int:
        if self._positions is not None and not self._duplicates:  # the common case first
            return self._positions[name]
        if self._positions is None and self._searches < SEARCHES_BEFORE_TABLE:
            self._searches += 1
            return self._search(name)
        table = self._table()
        if name in self._duplicates:
            raise FormatError(f"corrupt index: duplicate key {name!r}")
        return table[name]

    @property
    def listed(self) -> bool:
        """Whether every name is at hand (so naming any position is cheap)."""
        return self._names is not None

    def name(self, pos: int) -> str:
        """The name at ``pos`` (for an entry and its messages)."""
        found = self._found.get(pos)
        return found if found is not None else self._list()[pos]

    def names(self, positions: list[int]) -> list[str]:
        """The names at many positions (ascending)."""
        if self._names is None and all(p in self._found for p in positions):
            return [self._found[p] for p in positions]
        names = self._list()
        if positions and positions[-1] - positions[0] == len(positions) - 1:  # ascending, so a run
            return names[positions[0] : positions[-1] + 1]
        return [names[p] for p in positions]

    @property
    def positions(self) -> dict[str, int]:
        """Names to positions, for listing: refused if two keys are equal."""
        table = self._table()
        if self._duplicates:
            dup = next(n for n in self._list() if n in self._duplicates)
            raise FormatError(f"corrupt index: duplicate key {dup!r}")
        return table

    def _table(self) -> dict[str, int]:
        if self._positions is None:
            names = self._list()
            positions = dict(zip(names, range(len(names))))
            if len(positions) != len(names):
                self._duplicates = {n for n, times in Counter(names).items() if times > 1}
            self._positions = positions
        return self._positions

    def _list(self) -> list[str]:
        if self._names is None:
            self._names = self._text[1:-1].split("\0") if self._count else []
        return self._names

    def _search(self, name) -> int:
        if not isinstance(name, str) or "\0" in name:
            raise KeyError(name)
        needle = f"\0{name}\0"
        at = self._text.find(needle)
        if at < 0:
            raise KeyError(name)
        if self._text.find(needle, at + 1) >= 0:
            raise FormatError(f"corrupt index: duplicate key {name!r}")
        pos = self._text.count("\0", 0, at)
        self._found[pos] = name
        return pos
