"""Delta checkpoints in a CheckpointManager folder: which base, and rebasing.

With ``delta=True`` every checkpoint is either a **keyframe** (an ordinary
file) or a delta file (format 1.2) coded against the **latest keyframe**:
a star around each keyframe, never a longer chain, so restoring any
checkpoint reads at most two files. (A checkpoint rebased at retention may
be a delta against a later keyframe: a base need not be older.) A new
keyframe is written when one more delta would likely cost more per
checkpoint than starting afresh (:func:`keyframe_pays`), and at the latest
every ``keyframe_every`` saves (the keyframe counting as one). Measured on
a real fine-tune (docs/training.md, "Delta checkpoints"): a delta against
the keyframe grows with its distance from it, while a chain of deltas
against the previous checkpoint is smaller but makes a restore walk the
chain; the star keeps a restore at about twice a standalone one.

Retention deletes a checkpoint only after no kept checkpoint needs it: the
kept dependents of a keyframe about to go are rewritten first, as deltas
against the newest kept keyframe (or, if none is left, the earliest as a
new keyframe and the others against it), each atomically
(temporary file, fsync, rename), so that at every moment each listed
checkpoint is complete and its base present. Then the checkpoints nobody
keeps go, deltas before keyframes, so a crash between two deletions leaves
no listed delta without its base.
"""

from __future__ import annotations

import os
from pathlib import Path

from lazystore import api
from lazystore._native.base_ref import BASE_KEY
from lazystore._native.writer import Writer


def base_of(path: Path) -> str | None:
    """The file name of a checkpoint's base, or None for a keyframe."""
    with api.open(path) as ck:
        ref = ck.system_metadata.get(BASE_KEY)
    return None if ref is None else ref["file"]


def choose_base(mgr, step: int) -> Path | None:
    """The keyframe a new checkpoint of ``step`` is to be a delta against,
    or None when it is to be a keyframe itself: the first checkpoint, one
    saved out of order, one ``keyframe_every`` saves after the keyframe, or
    one whose delta would likely cost more than starting afresh (see
    :func:`keyframe_pays`)."""
    steps = [s for s in mgr.steps() if s != step]
    if not steps or steps[-1] > step:
        return None
    latest = steps[-1]
    base = mgr._base_name(latest)
    keyframe = mgr.path(latest).name if base is None else base
    first = next((s for s in steps if mgr.path(s).name == keyframe), None)
    if first is None:
        return None  # the base is no checkpoint of this folder's: start afresh
    # Deltas saved since the keyframe (not older checkpoints rebased onto it).
    deltas = [s for s in steps if s > first and mgr._base_name(s) == keyframe]
    if len(deltas) + 1 >= mgr.keyframe_every:
        return None
    sizes = [os.path.getsize(mgr.path(s)) for s in (first, *deltas)]
    return None if keyframe_pays(sizes) else mgr.directory / keyframe


def keyframe_pays(sizes: list[int]) -> bool:
    """Is a new keyframe cheaper in the long run than one more delta?
    ``sizes``: the current keyframe's file, then its deltas in order.

    A delta against the keyframe grows with the distance (the weights drift
    further from it), so each period (a keyframe and its deltas) costs its
    keyframe once and ever larger deltas. The average cost per checkpoint of
    the period is lowest when the period ends as its next delta would cost
    more than the average so far, which the last delta predicts. A frozen
    model, whose deltas stay tiny, then never pays for a new keyframe; a
    fast-moving one pays for one soon."""
    if len(sizes) < 2:
        return False
    return sizes[-1] * len(sizes) >= sum(sizes)


def rewrite(mgr, step: int, base: Path | None) -> None:
    """Write checkpoint ``step`` again, atomically, as a keyframe (``base``
    None) or a delta against ``base``: the same tensors, metadata and
    structure, read from the current file (through its own base)."""
    path = mgr.path(step)
    with api.open(path) as ck:
        system = {k: v for k, v in ck.system_metadata.items() if k != BASE_KEY}
        with Writer(path, compression=mgr.compression, metadata=ck.metadata, base=base) as w:
            w.system_metadata.update(system)
            for name in ck:
                w.add(name, ck[name])  # one tensor at a time, decoded through the chain
    mgr._rewritten(step, w.base_file)


def rebase_dependents(mgr, gone: list[int], keep: set[int]) -> None:
    """Before the checkpoints ``gone`` are deleted or replaced: rewrite the
    kept checkpoints (``keep``) whose base is one of them, as deltas against
    the newest kept keyframe, or, with none left, the earliest of them as a
    keyframe and the others against it."""
    for step in gone:
        name = mgr.path(step).name
        dependents = sorted(s for s in keep if s != step and mgr._base_name(s) == name)
        if not dependents:
            continue
        keyframes = [s for s in keep if s not in gone and mgr._base_name(s) is None]
        if keyframes:
            target = max(keyframes)
        else:
            target, *dependents = dependents
            rewrite(mgr, target, None)
        for s in dependents:
            rewrite(mgr, s, mgr.path(target))


def deletion_order(mgr, doomed: list[int]) -> list[int]:
    """Deltas first, then keyframes: a delta never outlives its base on disk."""
    return sorted(doomed, key=lambda s: mgr._base_name(s) is None)

