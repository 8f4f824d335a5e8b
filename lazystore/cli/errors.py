"""Failures as the command line reports them: one line, naming the file.

Commands raise :class:`CliError` for what they refuse, and run the code that
touches a file inside :func:`about` so that a library or OS error says which
file it came from. :mod:`lazystore.cli.main` turns whatever comes out into
one line on stderr and an exit code; nobody sees a traceback.
"""

from __future__ import annotations

import contextlib
import os
import re

import lazystore as ls
from lazystore.sinks.partials import PARTIAL_NAME

# The safetensors writer's spool, beside its target (interop/safetensors.py).
_SPOOL_PREFIX = ".lazystore-spool-"


class CliError(Exception):
    """An expected failure: printed as one line, with exit code ``code``
    (2, an error; 1 for ``ls``'s "no tensor matches")."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines too) made one space."""
    return " ".join(text.split())


def shown_file(filename, path):
    """The file an error should name: ``filename`` (the one the OS call was
    about), unless it is a writer's temporary file, which the user never
    asked for and which is gone by the time they look: then the target the
    temporary stands for (a partial file's name holds it), or ``path``."""
    if filename is None:
        return path
    folder, name = os.path.split(os.fspath(filename))
    partial = PARTIAL_NAME.fullmatch(name)
    if partial:
        return os.path.join(folder, partial["target"])
    if name.startswith(_SPOOL_PREFIX):
        return path if path is not None else folder
    return filename


def names(message: str, path) -> bool:
    """Whether ``message`` already names ``path``, so that prefixing it would
    name it twice: at its start, or (for a path that cannot be mistaken for
    an ordinary word: one with a dot or a slash) anywhere as a whole."""
    text = os.fspath(path)
    if message.startswith(f"{text}:"):
        return True
    if not re.search(r"[./\\]", text):
        return False  # "model" in "model weights" is a word, not the file
    return re.search(rf"(?<![\w./-]){re.escape(text)}(?![\w/-]|\.\w)", message) is not None


def os_error(exc: OSError, path) -> str:
    """The line for an OS error met while working on ``path`` (or None)."""
    where = shown_file(exc.filename, path)
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
        message = one_line(str(exc)) or type(exc).__name__
        raise CliError(message if names(message, path) else f"{path}: {message}") from exc
    except OSError as exc:
        raise CliError(os_error(exc, path)) from exc
