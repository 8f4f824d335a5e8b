"""Reverse deltas: the newest checkpoint whole, older ones deltas against newer ones.

The checkpoint read most is the latest (every resume reads it), so with
``delta=True`` every save writes its step **whole** (a keyframe), and only
once it is durable (and retention has run) is the checkpoint before it,
until then the whole newest, written again as a delta against it, by
:func:`after_save`: atomically (temporary file, fsync, rename), from its
own bytes read back checked. Unchanged tensors and chunks thus end up
stored once, in the newest file. What was coded against the previous
checkpoint stays valid without being touched: a format 1.3 delta names
its base by the content it was coded against, which a re-encoding keeps
(docs/format.md §9.4). So a save costs one whole write and one rewrite,
never a cascade. git's pack files and reverse-incremental backups store
their newest version whole for the same reason.

**The shape.** Saved in order, the checkpoints form chains ``older ->
newer -> ... -> keyframe``. A chain ends (the previous checkpoint stays
whole, a keyframe among old checkpoints) when coding it against the new
one would let a restore of something below it decode more than
``delta_depth`` checkpoints' worth of changed bytes beyond its whole file,
or make the chain longer than ``keyframe_every`` checkpoints. A delta
level's cost is the share of its bytes that changed
(:attr:`~lazystore.training.chains.Facts.work`): a fine-tune changes every
weight at every step (each level costs a full decode: at most
``delta_depth`` deltas deep, 2 by default, the restore of the oldest then
reads three files), while a frozen base with changing adapters changes
little, and its chain grows to ``keyframe_every`` cheaply. The whole files
among old checkpoints bound what one damaged file takes down (its chain
only) as well as the restore time.

**Why a chain and not a tree.** Every save makes the previous checkpoint a
delta, and so deepens all that was coded against it by one level: keeping
a tree of bounded depth would mean rewriting the deeper ones on every
save, one rewrite each. One rewrite per save is the budget (a delta
rewrite costs about a standalone save), so the chain ends instead.

**Crashes and failures.** Between the new checkpoint and the rewrite there
are two whole files, which is a valid series: a kill there, or a rewrite
that fails (the old file stays, whole, as it was) costs bytes, never a
checkpoint; a failure is logged (logger ``lazystore``) and the save still
succeeds. A previous checkpoint found damaged is noted and left as it is.

**Folders of older versions.** A forward series (deltas against older
checkpoints) restores as it is; old checkpoints leave with retention
(rebasing what a kept one needs), and the previous checkpoint is coded
against the new one like any other. Format 1.2 deltas (codec 2) name
their base by its index checksum and die with any rewrite of it, so the
first save of a manager re-encodes each as format 1.3 against the same
base, deepest first (its own 1.2 dependents before it), before anything
is rewritten.
"""

from __future__ import annotations

import logging

from lazystore._native.base_ref import MAX_CHAIN
from lazystore.training.chains import Series
from lazystore.training.damage import READ_ERRORS, Damaged
from lazystore.training.rebasing import rewrite

log = logging.getLogger("lazystore")

# Format versions whose deltas identify their base by its index checksum.
LEGACY = (1, 2)


def after_save(mgr, step: int) -> None:
    """Checkpoint ``step`` was just saved whole and retention has run: code
    the checkpoint before it as a delta against it, if the shape allows."""
    series = Series(mgr, mgr.steps())
    if not series.steps or series.steps[-1] != step:
        return  # deleted by retention (keep_best), or saved out of order: nothing is coded against it
    if _migrate(mgr, series):
        series = Series(mgr, mgr.steps())
    prev = _previous(mgr, series, step)
    if prev is None:
        return
    try:
        rewrite(mgr, prev, step, {step})  # step: written just now, and read checked as it is coded against
    except Damaged as found:
        mgr.files.note_damage(found.step, found.reason)
    except READ_ERRORS as exc:  # the disk full, say: prev stays whole, which costs bytes only
        log.warning("checkpoint step %d stays whole: coding it against step %d failed (%s)", prev, step, exc)


def _previous(mgr, series: Series, step: int) -> int | None:
    """The checkpoint to code against ``step`` now: the one before it, if it
    is not already coded against a newer one, and if coding it keeps every
    restore below it within ``delta_depth`` and its chain within
    ``keyframe_every`` checkpoints. None: it stays as it is."""
    earlier = [s for s in series.steps if s < step]
    if not earlier or not series.is_keyframe(step):
        return None
    prev = earlier[-1]
    below = series.descendants(prev)
    parent = series.parent[prev]
    if prev in series.foreign or (parent is not None and parent > prev):
        return None  # coded against a file that is no checkpoint here, or against a newer one already
    if mgr.files.known_damaged([prev, *below]):
        return None  # a damaged file, or what it is coded against, is never rewritten
    if any(mgr.files.facts(s).version <= LEGACY for s in series.children(prev)):
        return None  # it would die with prev rewritten (its migration failed)
    if len(below) + 2 > mgr.keyframe_every or _levels(series, prev, below) + 1 > MAX_CHAIN:
        return None
    return prev if _work(mgr, series, prev, below) <= mgr.delta_depth else None


def _levels(series: Series, top: int, below: list[int]) -> int:
    """How many deltas deep under ``top`` its deepest dependent is."""
    return max((series.depth(s) - series.depth(top) for s in below), default=0)


def _work(mgr, series: Series, prev: int, below: list[int]) -> float:
    """The most changed bytes (in checkpoints' worth) a restore of ``prev``
    or of one below it would decode beyond the whole file, were ``prev``
    coded against the newest. ``prev``'s own share is predicted by the
    delta coded last under it (its newest child), else by a whole one."""
    children = series.children(prev)
    own = mgr.files.facts(max(children)).work if children else 1.0
    worst = 0.0
    for s in below:
        path = [s, *series.chain(s)]
        worst = max(worst, sum(mgr.files.facts(x).work for x in path[: path.index(prev)]))
    return own + worst


def _migrate(mgr, series: Series) -> bool:
    """Re-encode every format 1.2 delta of the folder as 1.3, against the
    same base, deepest first; says whether any was. Damaged ones are noted
    and left as they are (and so is their base: see :func:`_previous`)."""
    legacy = [s for s in series.steps
              if series.parent[s] is not None and mgr.files.facts(s).version <= LEGACY]
    damaged = mgr.files.known_damaged(legacy)
    checked: set[int] = set()
    for s in sorted(legacy, key=lambda s: -series.depth(s)):
        if s in damaged or mgr.files.known_damaged(series.children(s)):
            continue  # nothing a damaged file is coded against changes under it
        try:
            rewrite(mgr, s, series.parent[s], checked)
        except Damaged as found:
            mgr.files.note_damage(found.step, found.reason)
    return bool(legacy)
