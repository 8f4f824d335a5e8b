"""One shared thread pool for chunk work.

zstandard, xxhash and numpy's copies release the GIL, so chunks encode,
decode and hash in parallel on threads without any process overhead.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="lazystore")
        return _pool


def start_all(fn, items):
    """Start ``fn`` on every item in the pool and return a function that
    waits for them all and gives their results, so the caller can work
    (say, write to disk) in between."""
    items = list(items)
    if len(items) <= 1 or threading.current_thread().name.startswith("lazystore"):
        # Nested use from a pool thread would deadlock a bounded pool.
        results = [fn(x) for x in items]
        return lambda: results
    futures = [pool().submit(fn, x) for x in items]

    def finish() -> list:
        # Wait for every task before raising: a task still running after the
        # caller has given up could read a file the caller then closes.
        wait(futures)
        return [f.result() for f in futures]

    return finish


def run_all(fn, items) -> list:
    """``[fn(x) for x in items]``, in parallel when there is more than one."""
    return start_all(fn, items)()
