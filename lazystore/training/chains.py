"""Delta checkpoints in a CheckpointManager folder: the shape of the series.

With ``delta=True`` every checkpoint is either a **keyframe** (an ordinary,
whole file) or a delta file (format 1.3) coded against another checkpoint,
its base. The bases form a forest whose roots are keyframes; which shape
the manager builds (the newest whole, older ones deltas against newer
ones) is :mod:`lazystore.training.reverse`, and retention's side of it
(rewriting what depends on a checkpoint that goes) is
:mod:`lazystore.training.rebasing`. Damaged checkpoints
(:mod:`lazystore.training.damage`) are in no tree: never a base.

This module reads the forest from the files: each checkpoint's base, its
format version (format 1.2 deltas die with any rewrite of their base) and
how much of it a restore decodes (:class:`Facts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lazystore import api
from lazystore._native.base_ref import BASE_KEY
from lazystore.training.damage import READ_ERRORS, describe

# A restore decodes at most this many checkpoints' worth of changed bytes
# beyond its whole file, by default: see lazystore.training.reverse.
DEFAULT_DEPTH = 2


@dataclass(frozen=True)
class Facts:
    """What the manager needs of one checkpoint, from its index alone."""

    base: str | None  # the file name of its base; None for a keyframe
    version: tuple  # its format version: a 1.2 delta dies with any rewrite of its base
    # The share of its decoded bytes a restore decodes from its own stored
    # bytes: 1 for a keyframe, 0 for a delta whose every tensor is unchanged.
    # (Per tensor: a tensor with any changed chunk counts whole.)
    work: float


def facts_of(path: Path) -> Facts:
    """Read :class:`Facts` from the index of the checkpoint at ``path``."""
    with api.open(path) as ck:
        ref = ck.system_metadata.get(BASE_KEY)
        total = changed = 0
        for name in ck:
            info = ck.info(name)
            total += info.nbytes
            if info.compression != "delta" or info.stored_nbytes:
                changed += info.nbytes
        version = tuple(ck.format_version)
    return Facts(None if ref is None else ref["file"], version, changed / total if total else 0.0)


class Series:
    """The bases of a folder's listed checkpoints, as steps: a forest whose
    roots are keyframes. A checkpoint whose base is no listed checkpoint (a
    file written by hand, say) is a root too, but no keyframe: nothing new
    is coded under it."""

    def __init__(self, mgr, steps: list[int]):
        names = {}
        for s in sorted(steps):
            try:
                names[s] = mgr.files.base_name(s)
            except READ_ERRORS as exc:  # cannot be opened: damaged, and no part of any tree
                mgr.files.note_damage(s, describe(mgr.path(s), exc))
        self.steps = list(names)
        by_name = {mgr.path(s).name: s for s in self.steps}
        self.parent: dict[int, int | None] = {}
        self.foreign: set[int] = set()  # based on a file that is not a listed checkpoint
        for s, name in names.items():
            self.parent[s] = by_name.get(name) if name is not None else None
            if name is not None and name not in by_name:
                self.foreign.add(s)

    def chain(self, step: int) -> list[int]:
        """The bases of ``step``, nearest first, up to its root."""
        out: list[int] = []
        s = self.parent[step]
        while s is not None and len(out) <= len(self.steps):  # the bound: no cycle can hang us
            out.append(s)
            s = self.parent[s]
        return out

    def depth(self, step: int) -> int:
        return len(self.chain(step))

    def root(self, step: int) -> int:
        chain = self.chain(step)
        return chain[-1] if chain else step

    def is_keyframe(self, step: int) -> bool:
        return self.parent[step] is None and step not in self.foreign

    def children(self, step: int, after: bool = False) -> list[int]:
        """Checkpoints coded against ``step`` (only those of later steps with ``after``)."""
        return [s for s in self.steps if self.parent[s] == step and (not after or s > step)]

    def descendants(self, step: int) -> list[int]:
        return [s for s in self.steps if step in self.chain(s)]

    def rebased(self, step: int, base: int | None) -> None:
        self.parent[step] = base
        self.foreign.discard(step)

    def removed(self, step: int) -> None:
        self.steps.remove(step)
        del self.parent[step]
        self.foreign.discard(step)
