"""A delta file's bases: found beside it, held while it is open, checked.

A tensor stored with codec 2 holds only its difference from the tensor of
the same name in the base file (docs/format.md §9.3), which may itself be a
delta against its own base, and so on down to a keyframe: a **chain**. A
:class:`Chain` holds the bases below one opened file, nearest first; the
file's view and each base's view see it through :class:`Bases`, the part of
the chain below them.

- **Opened safely.** A base is opened by name only through
  :mod:`lazystore.sources.safe_files`: a regular file in the delta's
  folder, never a FIFO, a device or a link out of the folder, and for a URL
  never a name that asks for another object.
- **Held.** Opening a local delta file opens the files of its whole chain
  at once (a mapping each, and of each index only the base's name), so a
  base deleted or replaced afterwards (retention in the same process) does
  not break the open view, as a plain file's view keeps its mapping. Each
  base's index is read when the base is first needed, and a remote chain
  is opened then too.
- **Walked without recursion.** Opening, decoding and verifying follow the
  chain in loops, never one call per link, and never further than
  ``MAX_CHAIN`` bases: reading a legal chain does not depend on how deep
  the caller's stack already is.
- **Checked.** Every byte decoded from a base is checked against its
  checksum, raw ones too, whatever the base file's own ``verify`` says.

- **Identified.** A codec-2 tensor (format 1.2) is decoded only against
  the very base file it was coded against: the base's index checksum is
  the one the delta recorded. A codec-3 tensor (format 1.3) only against
  the same *content*: before a chunk's difference is added onto the base's
  decoded chunk, those bytes must hash to the checksum the chunk recorded.
  So a base rewritten with the same content (recompressed, or made a delta
  against another file, as retention does) keeps its dependents valid,
  and checking costs a hash of each base chunk decoded, nothing on open.

Whatever goes wrong with a base -- missing, no regular file, not a
lazystore file, replaced or rewritten since the delta was written (for
codec 2 its index checksum differs from the one recorded, for codec 3 the
content of a chunk), a tensor that does not match -- is a
:class:`~lazystore.errors.BaseCheckpointError` naming the base; a damaged
chunk in it a ChecksumError naming it: never data decoded against the
wrong bytes.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from lazystore._native.base_ref import MAX_CHAIN, BaseRef, peek_base_ref
from lazystore._native.entry_rules import DELTA_CODEC
from lazystore._native.index import Entry
from lazystore.codecs import DELTA_CODEC_IDS
from lazystore.errors import BaseCheckpointError, ChecksumError, FormatError, TensorNotFoundError
from lazystore.sources import ByteSource, is_url

if TYPE_CHECKING:  # checkpoint imports this module
    from lazystore.views.checkpoint import CheckpointView


def sibling(location: str, name: str) -> str:
    """How to name ``name`` in the folder of ``location`` (a local path or a
    URL) in messages; opening it is :func:`lazystore.sources.open_beside`'s."""
    if is_url(location):
        return location.rsplit("/", 1)[0] + "/" + name
    return os.path.join(os.path.dirname(location), name)


def in_base(exc: ChecksumError, path: str) -> ChecksumError:
    """``exc``, a damaged chunk of a base, naming the base file."""
    return ChecksumError(f"{exc.what} of base checkpoint {path}", exc.expected, exc.actual)


class Link:
    """One base of a chain: the file ``ref`` names beside ``of``; its source
    while it is only held, its view once opened."""

    __slots__ = ("of", "path", "ref", "source", "view")

    def __init__(self, ref: BaseRef, of: str):
        self.ref = ref
        self.of = of
        self.path = sibling(of, ref.file)
        self.source: ByteSource | None = None
        self.view: CheckpointView | None = None

    def error(self, why: str) -> BaseCheckpointError:
        return BaseCheckpointError(f"base checkpoint {self.path} (of delta checkpoint {self.of}) {why}")

    def entry_for(self, entry: Entry) -> Entry:
        """The base's tensor that ``entry`` is a delta of: same name, dtype,
        shape and chunk grid (rule B2). Its size is then the delta's. A
        codec-2 delta's base must also be the very file it was coded
        against (rule B3); a codec-3 delta's content is checked chunk by
        chunk as it is decoded (rule B5).

        Asked only of a link :meth:`Chain.view` has opened."""
        view = self.view
        assert view is not None, "entry_for of a base not opened"
        if entry.codec == DELTA_CODEC:
            identity = view._file.index.identity
            assert identity is not None, "a base is a lazystore file: its trailer gives the identity"
            if identity != (self.ref.index_checksum, self.ref.index_length):
                raise self.error("is not the file it was coded against: it was replaced or rewritten since "
                                 f"(index xxh3 {identity[0]:016x}, expected {self.ref.index_checksum:016x})")
        try:
            found = view._entry(entry.name)
        except TensorNotFoundError:
            raise self.error(f"has no tensor {entry.name!r}") from None
        if (found.dtype, found.shape, found.grid) != (entry.dtype, entry.shape, entry.grid):
            raise self.error(f"holds tensor {entry.name!r} as {found.dtype} {found.shape} in chunks of "
                             f"{found.grid.extent} along axis {found.grid.axis}, not as the delta's "
                             f"{entry.dtype} {entry.shape} in chunks of {entry.grid.extent} along axis "
                             f"{entry.grid.axis}")
        return found

    def drop(self) -> None:
        """Let go of the file."""
        if self.view is not None:
            self.view.close()
        elif self.source is not None:
            self.source.close()
        self.view = self.source = None


class Chain:
    """The bases below one opened file, nearest first: held by
    :meth:`hold` (each file opened, its base's name peeked at), opened as
    views one after the other as far as needed.

    ``open_source(link)`` opens the link's file (FileNotFoundError,
    FormatError or OSError when it cannot); ``open_view(source, below)``
    reads it as a view whose own deltas decode through ``below`` (the
    :class:`Bases` below it)."""

    def __init__(self, location: str, ref: BaseRef, open_source, open_view):
        self.links = [Link(ref, location)]
        self._open_source = open_source
        self._open_view = open_view
        self._lock = threading.Lock()

    def hold(self) -> None:
        """Open every base's file now, as far as they open (a failure is
        raised when the base is needed), so that deleting or replacing one
        later changes nothing for the view. A file's index is not read
        here, only the name of its base: holding costs a few reads of
        mapped memory per base."""
        with self._lock:
            k = 0
            while k < min(len(self.links), MAX_CHAIN):
                link = self.links[k]
                try:
                    if link.view is None and link.source is None:
                        link.source = self._open_source(link)
                    below = (link.view._file.index.base if link.view is not None
                             else peek_base_ref(link.source))
                except (FormatError, OSError):
                    return
                if below is None:
                    return
                if len(self.links) == k + 1:
                    self.links.append(Link(below, link.path))
                k += 1

    def view(self, k: int) -> CheckpointView:
        """The view of base ``k`` (0: the nearest), opening the bases up to
        it that are not open yet; BaseCheckpointError naming the first that
        cannot be. A base that could not be opened is tried again next time."""
        with self._lock:
            links = self.links
            for j in range(k + 1):
                link = links[j]
                if link.view is not None:
                    continue
                link.view = self._open(j, link)
                # Its validated index says what its base is: what the hold
                # peeked at, but for a hostile file.
                below = link.view._file.index.base
                if len(links) > j + 1 and (below is None or links[j + 1].ref != below):
                    for stale in links[j + 1 :]:
                        stale.drop()
                    del links[j + 1 :]
                if below is not None and len(links) == j + 1:
                    links.append(Link(below, link.path))
            view = links[k].view
            assert view is not None, "link k was opened last, by the loop above"
            return view

    def _open(self, j: int, link: Link) -> CheckpointView:
        if j >= MAX_CHAIN:
            raise link.error(f"is more than {MAX_CHAIN} bases down a chain (lazystore follows {MAX_CHAIN})")
        source, link.source = link.source, None
        try:
            if source is None:
                source = self._open_source(link)
            view = self._open_view(source, Bases(self, j + 1))
        except FileNotFoundError:
            raise link.error("is missing") from None
        except (FormatError, OSError) as exc:
            raise link.error(f"cannot be read: {exc}") from None
        return view

    def close(self) -> None:
        with self._lock:
            for link in self.links:
                link.drop()


class Bases:
    """The part of a :class:`Chain` below one file (its bases from the
    ``start``-th on): what that file's reader decodes its deltas onto."""

    def __init__(self, chain: Chain, start: int = 0, *, owner: bool = False):
        self.chain = chain
        self.start = start
        self.owner = owner  # the opened file's, which closes the chain with it
        self._plans: dict[str, list] = {}

    @property
    def path(self) -> str:
        """Where the nearest base is."""
        return self.chain.links[self.start].path

    @property
    def depth(self) -> int:
        """How many bases lie below the file, as far as they are known (all
        of them, once held; one more than the limit if the chain is longer)."""
        return len(self.chain.links) - self.start

    def hold(self) -> None:
        self.chain.hold()

    def plan(self, entry: Entry) -> list:
        """``(file, entry)`` for each base ``entry`` (a delta) is decoded
        from, nearest first, down to the first that is not a delta. Each is
        checked to be the same tensor (rule B2), so the size the delta
        claims is the size of a tensor stored, bounded by its file."""
        plan = self._plans.get(entry.name)
        if plan is None:
            plan, k, wanted = [], self.start, entry
            while True:
                view = self.chain.view(k)
                link = self.chain.links[k]
                wanted = link.entry_for(wanted)
                plan.append((view._file, wanted))
                if wanted.codec not in DELTA_CODEC_IDS:
                    break
                k += 1  # a delta tensor's file names its base (rule B1): the chain goes on
            self._plans[entry.name] = plan
        return plan

    def fill(self, entry: Entry, chunk_ids, out, places) -> None:
        """The base's decoded bytes of ``entry``'s chunks into ``out`` at
        ``places``: the keyframe's chunks, then each delta above it added
        in turn. Every byte read is checked, raw chunks too."""
        plan = self.plan(entry)
        for n, (file, base) in enumerate(reversed(plan)):
            try:
                if n == 0:
                    file.reader.fill(base, chunk_ids, out, True, places)
                else:
                    file.reader.add_deltas(base, chunk_ids, out, places)
            except ChecksumError as exc:
                raise in_base(exc, file.source.name) from None

    def failing(self, entries: list[Entry]) -> set[str]:
        """Names of the tensors whose base tensors, down the chain, fail
        verification."""
        bad: set[str] = set()
        todo = [(e.name, e) for e in entries]
        k = self.start
        while todo:
            view = self.chain.view(k)
            link = self.chain.links[k]
            level = [(name, link.entry_for(e)) for name, e in todo]
            ok = view._file.reader.stored_ok_many([e for _, e in level])
            bad.update(name for (name, _), good in zip(level, ok) if not good)
            todo = [(name, e) for (name, e), good in zip(level, ok) if good and e.codec in DELTA_CODEC_IDS]
            k += 1
        return bad

    def changed(self, what: str, expected: int, actual: int) -> BaseCheckpointError:
        """The error for a codec-3 chunk whose base's decoded bytes are not
        the content it was coded against (rule B5), naming the base."""
        return self.chain.links[self.start].error(
            f"is not the content it was coded against: it was replaced or rewritten since ({what} was coded "
            f"against base bytes of xxh3 {expected:016x}, the base's decode to {actual:016x})")

    def changed_digest(self, what: str, algorithm: str, expected: bytes, actual: bytes) -> BaseCheckpointError:
        """:meth:`changed`, found by the base digest of a file with chunk
        digests (format 1.4, rule G3)."""
        return self.chain.links[self.start].error(
            f"is not the content it was coded against: it was replaced or rewritten since ({what} was coded "
            f"against base bytes of {algorithm} {expected.hex()}, the base's decode to {actual.hex()})")

    def close(self) -> None:
        self._plans = {}  # they hold the bases' files, and so their mappings
        if self.owner:
            self.chain.close()
