"""Process-wide settings a test may change, put back after every test
(the autouse fixture in tests/conftest.py).

Some code under test changes a setting for the rest of the process and never
puts it back: Lightning's ``Trainer(deterministic=True)`` turns on torch's
deterministic algorithms, and with them on torch cannot even copy a float4
tensor (its deterministic ``empty`` fills memory, and has no float4 kernel).
Every test after it in the same run then fails for no fault of its own.
Restoring these settings makes a test's outcome independent of the tests that
ran before it, so the suite passes in any order (``--random-order``).

Each setting is read before the test and written back only if the test left it
different; reading them all costs microseconds. Torch's and numpy's settings
are covered only when the module is already imported: this never imports them.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple


class Setting(NamedTuple):
    name: str
    get: Callable[[], object]
    set: Callable[[object], None]


# pytest rewrites this one in every phase of every test: not the test's doing.
PYTEST_OWN = "PYTEST_CURRENT_TEST"
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != PYTEST_OWN}


def _set_environ(saved: dict[str, str]) -> None:
    for key in set(_environ()) - set(saved):
        del os.environ[key]
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _set_signal(number: int) -> Callable[[object], None]:
    def put_back(handler: object) -> None:
        if handler is not None:  # None: a handler set from C, which Python cannot reinstall
            signal.signal(number, handler)
    return put_back


PROCESS = [
    Setting("environment variables", _environ, _set_environ),
    Setting("working directory", os.getcwd, os.chdir),
    Setting("recursion limit", sys.getrecursionlimit, sys.setrecursionlimit),
    *(Setting(f"{signal.Signals(n).name} handler", lambda n=n: signal.getsignal(n), _set_signal(n)) for n in SIGNALS),
]


def _torch_settings(torch) -> list[Setting]:
    def deterministic() -> tuple[bool, bool]:
        return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()

    def set_deterministic(mode) -> None:
        torch.use_deterministic_algorithms(mode[0], warn_only=mode[1])

    def safe_globals() -> set:
        return set(torch.serialization.get_safe_globals())  # torch keeps a set: its list's order varies

    def set_safe_globals(saved) -> None:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(list(saved))

    return [
        Setting("torch deterministic algorithms", deterministic, set_deterministic),
        Setting("torch threads", torch.get_num_threads, torch.set_num_threads),
        Setting("torch default dtype", torch.get_default_dtype, torch.set_default_dtype),
        Setting("torch float32 matmul precision", torch.get_float32_matmul_precision,
                torch.set_float32_matmul_precision),
        Setting("torch grad mode", torch.is_grad_enabled, torch.set_grad_enabled),
        Setting("torch safe globals", safe_globals, set_safe_globals),
    ]


def _numpy_settings(np) -> list[Setting]:
    return [
        Setting("numpy print options", np.get_printoptions, lambda saved: np.set_printoptions(**saved)),
        Setting("numpy floating-point errors", np.geterr, lambda saved: np.seterr(**saved)),
    ]


def settings() -> list[Setting]:
    """The settings covered now (torch's and numpy's once they are imported)."""
    out = list(PROCESS)
    if (torch := sys.modules.get("torch")) is not None:
        out += _torch_settings(torch)
    if (np := sys.modules.get("numpy")) is not None:
        out += _numpy_settings(np)
    return out


@contextmanager
def restored_settings() -> Iterator[None]:
    """Put back, on the way out, every covered setting the body changed."""
    saved = [(s, s.get()) for s in settings()]
    try:
        yield
    finally:
        for setting, value in saved:
            if setting.get() != value:
                setting.set(value)
