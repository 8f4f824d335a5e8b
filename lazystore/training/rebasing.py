"""Retention in a delta series: never delete a base that a kept checkpoint needs.

A delta file names its base by file name and index checksum, so a base
that goes, and also a base that is rewritten (its index changes), leaves
what was coded against it unreadable. Before checkpoints go (retention) or
are replaced (a step saved again), every kept checkpoint whose chain of
bases passes through one of them is rewritten, atomically (temporary file,
fsync, rename):

* against its nearest kept base that is not itself rewritten (so the tree
  only gets shallower: a restore never reads more files than before);
* or, when there is none (its keyframe goes), against the newest kept
  keyframe, or against a new keyframe: one of them rewritten as one.

Deepest first: a checkpoint is rewritten only once nothing listed depends
on it any more (what depended on it was rewritten before it, or deleted if
it was going anyway), and always against a base that stays as it is. So at
every moment each listed checkpoint is complete, and its base is present
and the very file it was coded against: a kill -9 anywhere leaves every
listed checkpoint restorable. Then the checkpoints nobody keeps go, deepest
first, for the same reason.
"""

from __future__ import annotations

from pathlib import Path

from lazystore import api
from lazystore._native.base_ref import BASE_KEY
from lazystore._native.writer import Writer
from lazystore.errors import LazyStoreError
from lazystore.sinks import fsync_dir
from lazystore.training.chains import Series


def rewrite(mgr, step: int, base: Path | None) -> None:
    """Write checkpoint ``step`` again, atomically, as a keyframe (``base``
    None) or a delta against ``base``: the same tensors, metadata and
    structure, read from the current file (through its own bases)."""
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
    kept checkpoints (``keep``) whose chain passes through one of them (see
    the module docstring). Checkpoints in ``gone`` that depend on one being
    rewritten are deleted first."""
    series = Series(mgr, mgr.steps())
    gone = {s for s in gone if s in series.parent}
    moving = {s for s in keep if s in series.parent and s not in gone and gone.intersection(series.chain(s))}
    if not moving:
        return
    depth = {s: series.depth(s) for s in moving}  # before any rewriting: dependents are deeper
    target = {s: next((a for a in series.chain(s) if a in keep and a not in gone and a not in moving), None)
              for s in moving}
    orphans = [s for s in moving if target[s] is None]
    if orphans:
        keyframes = [s for s in keep if s not in gone and s not in moving and series.is_keyframe(s)]
        if keyframes:
            root = max(keyframes)
        else:
            # The deepest orphan: nothing kept depends on it (that would be deeper still).
            root = max(orphans, key=lambda s: (depth[s], s))
            _drop_below(mgr, series, root, gone)
            rewrite(mgr, root, None)
            series.rebased(root, None)
            moving.discard(root)
        target.update((s, root) for s in orphans)
    for s in sorted(moving, key=lambda s: -depth[s]):
        _drop_below(mgr, series, s, gone)
        rewrite(mgr, s, mgr.path(target[s]))
        series.rebased(s, target[s])


def _drop_below(mgr, series: Series, step: int, gone: set[int]) -> None:
    """Delete the checkpoints still coded against ``step`` (directly or not),
    which are all going: what was kept of them has been rewritten already."""
    below = series.descendants(step)
    if not below:
        return
    if not gone.issuperset(below):  # cannot happen: a kept one is deeper, so rewritten already
        raise LazyStoreError(f"internal: checkpoints {sorted(set(below) - gone)} still depend on step {step}")
    for s in sorted(below, key=lambda s: -series.depth(s)):
        mgr._remove(s)
        series.removed(s)
    fsync_dir(mgr.directory)  # durably gone before the base they needed is rewritten


def deletion_order(mgr, doomed: list[int]) -> list[int]:
    """Deepest first: a delta never outlives its base on disk."""
    series = Series(mgr, mgr.steps())
    listed = [s for s in doomed if s in series.parent]
    return sorted(listed, key=lambda s: -series.depth(s))
