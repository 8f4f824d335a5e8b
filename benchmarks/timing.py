"""The one timing helper every measure uses.

These machines are shared and noisy, so absolute times drift: what is
quoted is the ratio of two timings from the same run. ``compare`` runs the
cases interleaved (one call of each per round, the order rotating every
round) so a slow spell hits all of them, after a warm-up round, and keeps
every sample; the figure quoted is the median.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]  # seconds, one per round

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)


@contextmanager
def _frozen_heap() -> Iterator[None]:
    """Every object alive now set aside from garbage collection until the
    block ends, so that the ``gc.collect()`` before each timed call (which
    frees what earlier calls left in cycles) scans only what the cases
    made. With torch and transformers imported a full collection takes
    ~0.3 s on the 2-core machine: it was most of a quick benchmark run."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def compare(
    cases: Mapping[str, Callable[[], object]],
    *,
    reps: int,
    warmup: int = 1,
    setup: Callable[[], None] | None = None,
) -> dict[str, Timing]:
    """Time each zero-argument callable ``reps`` times, interleaved.

    ``setup`` runs, untimed, before every call (to delete a previous output,
    say). What a call returns is released after its clock stops, so freeing
    a loaded checkpoint is not timed either.
    """
    names = list(cases)
    samples: dict[str, list[float]] = {n: [] for n in names}
    with _frozen_heap():
        for round_ in range(warmup + reps):
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                if setup is not None:
                    setup()
                gc.collect()
                gc.disable()
                try:
                    start = time.perf_counter()
                    result = cases[name]()
                    elapsed = time.perf_counter() - start
                finally:
                    gc.enable()
                del result
                if round_ >= warmup:
                    samples[name].append(elapsed)
    return {n: Timing(tuple(s)) for n, s in samples.items()}


def cpu_time(fn: Callable[[], object], *, reps: int) -> float:
    """Median CPU time (user + system, all of the process's threads) of one
    call of ``fn``, after a warm-up call. On a shared machine whose cores
    other work holds, wall times stretch while CPU time stays: the ratio of
    two CPU times says how the work compares, and with n free cores a
    parallel decoder's wall time would approach its CPU time / n."""
    samples = []
    with _frozen_heap():
        for round_ in range(reps + 1):
            gc.collect()
            start = time.process_time()
            result = fn()
            elapsed = time.process_time() - start
            del result
            if round_:
                samples.append(elapsed)
    return statistics.median(samples)
