"""Progress bars on stderr for the long commands (verify, convert, diff, merge).

Neither tqdm nor rich is a dependency: :func:`progress` uses whichever is
installed, and is plain iteration without them or when stderr is not a
terminal, so piped output and logs never hold bar fragments.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class _RichBar:
    """rich's progress bar behind tqdm's update/close."""

    def __init__(self, total, desc, unit):
        from rich.console import Console
        from rich.progress import Progress

        self._progress = Progress(console=Console(stderr=True), transient=True)
        self._progress.start()
        self._task = self._progress.add_task(desc, total=total)

    def update(self, n):
        self._progress.advance(self._task, n)

    def close(self):
        self._progress.stop()


def _make_bar(total: int | None, desc: str, unit: str):
    """A progress bar on stderr (tqdm, else rich), or None when neither is installed."""
    # Imported here, not at the top: both are optional, and a command that
    # shows no bar (piped stderr) should not pay for importing them.
    try:
        from tqdm import tqdm
    except ImportError:
        pass
    else:
        scale = unit == "B"
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=scale, unit_divisor=1024 if scale else 1000,
                    file=sys.stderr, leave=False, dynamic_ncols=True)
    try:
        return _RichBar(total, desc, unit)
    except ImportError:
        return None


def progress(items: Iterable, *, desc: str, total: int | None = None,
             weight: Callable | None = None, unit: str = "B") -> Iterator:
    """Yield ``items``, showing a bar on stderr when stderr is a terminal.

    Each item counts ``weight(item)`` (or 1) once the caller is done with it.
    Piped, or with neither tqdm nor rich installed, it is plain iteration."""
    bar = _make_bar(total, desc, unit) if _stderr_is_tty() else None
    if bar is None:
        yield from items
        return
    try:
        for item in items:
            yield item
            bar.update(weight(item) if weight else 1)
    finally:
        bar.close()
