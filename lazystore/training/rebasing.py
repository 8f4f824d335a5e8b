"""Retention in a delta series: never delete a base that a kept checkpoint needs.

A delta file names its base by file name, so a base that goes leaves what
was coded against it unreadable; so does a base replaced by other content
(a step saved again), and, for a format 1.2 delta (identified with its
base by the base's index checksum), any rewrite of its base. (A 1.3 delta,
as lazystore writes them, is identified with its base by content: a base
rewritten with the same content keeps it valid, which a series that
rewrites its older checkpoints relies on: :mod:`lazystore.training.reverse`.)
Before checkpoints go (retention) or are replaced (a step saved again),
every kept checkpoint whose chain of bases passes through one of them is
rewritten, atomically (temporary file, fsync, rename):

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

A rewrite never turns bytes nobody checked into a file with fresh
checksums: it reads its input with every chunk checked (the file and its
chain of bases), and checks the base it codes against first. A checkpoint
that fails is damaged (:mod:`lazystore.training.damage`): it is left as it
is, and so is every file of its chain (nothing it names is deleted or
rewritten under it); the plan is then made again around it.
"""

from __future__ import annotations

from lazystore import api
from lazystore._native.base_ref import BASE_KEY
from lazystore.errors import LazyStoreError
from lazystore.sinks import fsync_dir
from lazystore.training.chains import Series
from lazystore.training.damage import READ_ERRORS, Damaged, check, describe
from lazystore.writing.writer import Writer


def rewrite(mgr, step: int, base: int | None, checked: set[int]) -> None:
    """Write checkpoint ``step`` again, atomically, as a keyframe (``base``
    None) or a delta against checkpoint ``base``: the same tensors, metadata
    and structure, read from the current file (through its own bases) with
    every byte checked. Raises :class:`Damaged` (and writes nothing) if
    ``step`` or ``base`` fails its checks; ``checked``: bases already
    checked in this pass."""
    if base is not None and base not in checked:
        reason = check(mgr.path(base))  # a delta coded against bad bytes would not restore
        if reason is not None:
            raise Damaged(base, reason)
        checked.add(base)
    path = mgr.path(step)
    ck = _reading(step, path, lambda: api.open(path, verify=True))
    with ck:
        system = {k: v for k, v in ck.system_metadata.items() if k != BASE_KEY}
        with Writer(path, compression=mgr.compression, digest=mgr.digest, metadata=ck.metadata,
                    base=None if base is None else mgr.path(base)) as w:
            w.system_metadata.update(system)
            for name in ck:
                # One tensor at a time, decoded through the chain and checked chunk by chunk.
                w.add(name, _reading(step, path, lambda name=name: ck[name]))
    mgr.files.forget(step)
    checked.add(step)  # written just now from checked bytes: no need to read it all again as a base


def _reading(step: int, path, read):
    """``read()``, with a failure of the bytes read being ``step``'s damage
    (and not a failure of the writing around it)."""
    try:
        return read()
    except READ_ERRORS as exc:
        raise Damaged(step, describe(path, exc)) from exc


def rebase_dependents(mgr, gone: list[int], keep: set[int], *, replacing: bool = False) -> set[int]:
    """Before the checkpoints ``gone`` are deleted or replaced: rewrite the
    kept checkpoints (``keep``) whose chain passes through one of them (see
    the module docstring). Checkpoints in ``gone`` that depend on one being
    rewritten are deleted first.

    Returns the checkpoints of ``gone`` that may be deleted now: not those a
    damaged checkpoint names (directly or down its chain), which stay.
    ``replacing``: ``gone`` is a step being saved again, replaced whatever
    depends on it; a damaged checkpoint coded against it is left as it is."""
    checked: set[int] = set()
    for _ in range(len(mgr.steps()) + 2):  # each round finds one more damaged checkpoint, or ends
        try:
            return _rebase(mgr, set(gone), set(keep), replacing, checked)
        except Damaged as found:
            mgr.files.note_damage(found.step, found.reason)  # then plan again, around it
    raise LazyStoreError(f"internal: rebasing in {mgr.directory} found new damage in every round")


def _rebase(mgr, gone: set[int], keep: set[int], replacing: bool, checked: set[int]) -> set[int]:
    series = Series(mgr, mgr.steps())
    damaged = set(mgr.files.known_damaged(series.steps)) - gone
    # A damaged checkpoint is never rewritten, and nothing it is coded against may change under it.
    frozen = damaged.union(*(series.chain(d) for d in damaged))
    if replacing:
        frozen = damaged  # the step goes whatever needs it: what is intact is rewritten, the damaged left
    gone = {s for s in gone if s in series.parent and s not in frozen}
    moving = {s for s in keep if s in series.parent and s not in gone and s not in frozen
              and gone.intersection(series.chain(s))}
    if not moving:
        return gone
    stays = {s for s in keep if s in series.parent and s not in gone and s not in moving and s not in damaged}
    depth = {s: series.depth(s) for s in moving}  # before any rewriting: dependents are deeper
    target = {s: next((a for a in series.chain(s) if a in stays), None) for s in moving}
    orphans = [s for s in moving if target[s] is None]
    if orphans:
        keyframes = [s for s in stays if series.is_keyframe(s)]
        if keyframes:
            root = max(keyframes)
        else:
            # The deepest orphan: nothing kept depends on it (that would be deeper still).
            root = max(orphans, key=lambda s: (depth[s], s))
            _drop_below(mgr, series, root, gone, damaged)
            rewrite(mgr, root, None, checked)
            series.rebased(root, None)
            moving.discard(root)
        target.update((s, root) for s in orphans)
    for s in sorted(moving, key=lambda s: -depth[s]):
        _drop_below(mgr, series, s, gone, damaged)
        rewrite(mgr, s, target[s], checked)
        series.rebased(s, target[s])
    return gone


def _drop_below(mgr, series: Series, step: int, gone: set[int], damaged: set[int]) -> None:
    """Delete the checkpoints still coded against ``step`` (directly or not),
    which are all going: what was kept of them has been rewritten already.
    (A damaged one below a step being replaced stays, as it is.)"""
    below = [s for s in series.descendants(step) if s not in damaged]
    if not below:
        return
    if not gone.issuperset(below):  # cannot happen: a kept one is deeper, so rewritten already
        raise LazyStoreError(f"internal: checkpoints {sorted(set(below) - gone)} still depend on step {step}")
    for s in sorted(below, key=lambda s: -series.depth(s)):
        mgr.files.remove(s)
        series.removed(s)
    fsync_dir(mgr.directory)  # durably gone before the base they needed is rewritten


def deletion_order(mgr, doomed: list[int]) -> list[int]:
    """Deepest first: a delta never outlives its base on disk."""
    series = Series(mgr, mgr.steps())
    listed = [s for s in doomed if s in series.parent]
    return sorted(listed, key=lambda s: -series.depth(s))
