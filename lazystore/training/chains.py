"""Delta checkpoints in a CheckpointManager folder: the shape of the series,
and which base a new checkpoint gets.

With ``delta=True`` every checkpoint is either a **keyframe** (an ordinary
file) or a delta file (format 1.3) coded against another checkpoint, its
base. The bases form a tree under each keyframe, at most ``delta_depth``
deltas deep, so restoring any checkpoint reads at most ``delta_depth + 1``
files:

* depth 1 is a star: every delta against the keyframe;
* depth 2 (the default) is a star of stars: **centres** coded against the
  keyframe, and the checkpoints after a centre coded against it, until a
  new centre pays; and so on for deeper bounds.

Why: measured on a real fine-tune (docs/training.md, "Delta checkpoints"),
a delta grows with the distance between the two checkpoints, at every
distance (every 10 steps, against the keyframe: 0.43, 0.49, 0.52, 0.56,
0.60, 0.62, 0.63 of a standalone checkpoint). A chain against the previous
checkpoint keeps every delta one interval wide but makes a restore decode
every file back to the keyframe; a star keeps restores at two files but
its deltas widen. A second level keeps most deltas one or two intervals
wide at three files per restore. (8 checkpoints every 10 steps, model
weights, over standalone: a star with one keyframe 0.60, the manager's
star 0.65 (it renewed its keyframe), two levels 0.58, the best tree of
depth 2 0.58, an unbounded chain 0.56. The price: restoring the deepest
checkpoint took 2.9-3.3x a standalone restore, a star's 2.0-2.1x.)

When a centre or the keyframe is renewed follows one rule,
:func:`keyframe_pays`: a star (its centre, then the deltas against it)
costs its centre once and ever wider deltas, and the average per
checkpoint is lowest when it ends as its next delta would cost more than
the average so far. A new keyframe is also written every
``keyframe_every`` saves at the latest (the keyframe counting as one).

Retention's side of the tree (rewriting what depends on a checkpoint that
goes) is :mod:`lazystore.training.rebasing`. Damaged checkpoints
(:mod:`lazystore.training.damage`) are in no tree: never a base.
"""

from __future__ import annotations

import os
from pathlib import Path

from lazystore import api
from lazystore._native.base_ref import BASE_KEY
from lazystore.training.damage import READ_ERRORS, describe

# Deltas per restore at most, by default (a restore reads one file more):
# see the module docstring and docs/training.md for the measured trade.
DEFAULT_DEPTH = 2


def base_of(path: Path) -> str | None:
    """The file name of a checkpoint's base, or None for a keyframe."""
    with api.open(path) as ck:
        ref = ck.system_metadata.get(BASE_KEY)
    return None if ref is None else ref["file"]


class Series:
    """The bases of a folder's listed checkpoints, as steps: a forest whose
    roots are keyframes. A checkpoint whose base is no listed checkpoint (a
    file written by hand, say) is a root too, but no keyframe: nothing new
    is coded under it."""

    def __init__(self, mgr, steps: list[int]):
        names = {}
        for s in sorted(steps):
            try:
                names[s] = mgr._base_name(s)
            except READ_ERRORS as exc:  # cannot be opened: damaged, and no part of any tree
                mgr._note_damage(s, describe(mgr.path(s), exc))
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
        out, s = [], self.parent[step]
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


def choose_base(mgr, step: int) -> Path | None:
    """The checkpoint a new checkpoint of ``step`` is to be a delta against,
    or None when it is to be a keyframe itself: the first checkpoint, one
    saved out of order, one ``keyframe_every`` saves after the keyframe, or
    one whose delta would likely cost more than starting afresh. A base
    known to be damaged is never chosen; one found damaged while the delta
    is coded makes the save a keyframe instead (manager.save)."""
    steps = [s for s in mgr.steps() if s != step]
    damaged = mgr._known_damaged(steps)
    series = Series(mgr, [s for s in steps if s not in damaged])
    if not series.steps or series.steps[-1] > step:
        return None
    keyframe = series.root(series.steps[-1])
    if not series.is_keyframe(keyframe):
        return None  # the latest checkpoint's root is no keyframe of this folder's: start afresh
    # Saved since the keyframe (not older checkpoints rebased onto it).
    period = [s for s in series.steps if s > keyframe and series.root(s) == keyframe]
    if len(period) + 1 >= mgr.keyframe_every:
        return None
    sizes = {s: os.path.getsize(mgr.path(s)) for s in (keyframe, *period)}
    # The current centre at each depth: the latest checkpoint coded against the one above.
    spine = [keyframe]
    while len(spine) < mgr.delta_depth:
        later = series.children(spine[-1], after=True)
        if not later:
            break
        spine.append(later[-1])
    # From the deepest centre up, the first whose star does not yet pay for a new centre.
    level = next((d for d in range(len(spine) - 1, 0, -1)
                  if not keyframe_pays([sizes[s] for s in (spine[d], *series.children(spine[d], after=True))])), 0)
    base = spine[level]
    # What the new delta will likely cost: the last delta against the same
    # base, or else the last one at the same depth.
    alike = series.children(base, after=True) or [s for s in period if series.depth(s) == level + 1]
    if alike and keyframe_pays([*sizes.values(), sizes[alike[-1]]]):
        return None
    # Not checked here: coding the delta reads every base byte it uses,
    # checked, and a failure makes the save a keyframe (manager.save).
    return mgr.path(base)


def keyframe_pays(sizes: list[int]) -> bool:
    """Is starting a new star cheaper in the long run than one more delta in
    this one? ``sizes``: the star's centre (a keyframe, or a delta itself),
    then its deltas in order, the last of which predicts the next one.

    A delta against the centre grows with the distance (the weights drift
    further from it), so each star costs its centre once and ever larger
    deltas. The average cost per checkpoint of the star is lowest when it
    ends as its next delta would cost more than the average so far. A
    frozen model, whose deltas stay tiny, then never pays for a new
    keyframe; a fast-moving one pays for one soon."""
    if len(sizes) < 2:
        return False
    return sizes[-1] * len(sizes) >= sum(sizes)
