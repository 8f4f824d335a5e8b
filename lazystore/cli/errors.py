"""Failures as the command line reports them: one line, naming the file.

Commands raise :class:`CliError` for what they refuse, and run the code that
touches a file inside :func:`about` so that a library or OS error says which
file it came from. :mod:`lazystore.cli.main` turns whatever comes out into
one line on stderr and an exit code; nobody sees a traceback.
"""

from __future__ import annotations

import contextlib
import os

import lazystore as ls


class CliError(Exception):
    """An expected failure: printed as one line, exit code 2."""


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def os_error(exc: OSError, path) -> str:
    """The line for an OS error met while working on ``path`` (or None)."""
    where = exc.filename if exc.filename is not None else path
    reason = exc.strerror or one_line(str(exc))
    if where is not None and reason in ("", os.fspath(where)):
        # Some filesystems (fsspec's HTTP, say) put only the path in the
        # message; the reason is in the error's type and its cause.
        reason = type(exc).__name__
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause):
            reason += f": {one_line(str(cause))}"
    if exc.filename is None and where is not None and os.path.isdir(where):
        reason = "is a folder, not a checkpoint file"
    return f"{where}: {reason}" if where is not None else reason


@contextlib.contextmanager
def about(path):
    """Name ``path`` in any lazystore or OS error raised inside the block."""
    try:
        yield
    except CliError:
        raise  # already names its file (an inner about, or a refusal)
    except ls.LazyStoreError as exc:
        raise CliError(f"{path}: {one_line(str(exc)) or type(exc).__name__}") from exc
    except OSError as exc:
        raise CliError(os_error(exc, path)) from exc
