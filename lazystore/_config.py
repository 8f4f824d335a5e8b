"""What this lazystore runs with: its version and format, the libraries it
decodes through, and whether its C kernels are in use
(``lazystore.show_config()``; ``lazystore --version`` prints the kernels' line).

The kernels are optional: an install without a C compiler goes on without
them and decodes through Blosc and numpy, slower, to the same bytes. Nothing
else tells the two installs apart, so this says which one runs, from which
file, and why the kernels are missing when they are (as python-zstandard's
``zstandard.backend`` says which of its backends was imported).
"""

from __future__ import annotations

import platform
import sys

import ml_dtypes
import numcodecs
import numpy
import xxhash
import zstandard
from numcodecs import blosc

from lazystore._core.distribution import VERSION
from lazystore._native.layout import FORMAT_MAJOR, FORMAT_MINOR
from lazystore.codecs import compiled
from lazystore.errors import InvalidInputError

KERNELS = "C kernels"
MODES = ("stdout", "dicts")


def kernels_status() -> str:
    """In use, from which file and with which loops; or why not."""
    if compiled.kernels is not None:
        return f"in use: {compiled.kernels.__file__}; {compiled.kernels.dispatch}"
    why = compiled.import_error or "switched off"
    return f"not in use ({why}); decoding through Blosc and numpy, slower, to the same bytes"


def config() -> dict[str, str]:
    """Each component's name and what this process runs of it, as text."""
    zstd_library = ".".join(map(str, zstandard.ZSTD_VERSION))
    return {
        "lazystore": VERSION,
        "format": f"{FORMAT_MAJOR}.{FORMAT_MINOR}",
        "python": f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})",
        "numpy": numpy.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "zstandard": f"{zstandard.__version__} (backend {zstandard.backend}, zstd {zstd_library})",
        "xxhash": f"{xxhash.VERSION} (xxHash {xxhash.XXHASH_VERSION})",
        "numcodecs": f"{numcodecs.__version__} (Blosc {blosc.VERSION_STRING})",
        KERNELS: kernels_status(),
    }


def show_config(mode: str = "stdout") -> dict[str, str] | None:
    """Print what this lazystore runs with, or return it as a dict.

    That is lazystore's version, its format version, the versions of the
    libraries it uses, and whether its optional C kernels are in use (and
    from which file), as ``numpy.show_config`` shows numpy's.

    Parameters
    ----------
    mode : {"stdout", "dicts"}, optional
        ``"stdout"`` (the default) prints one ``name: value`` line per
        component; ``"dicts"`` returns the same as a dict instead.

    Returns
    -------
    dict of str to str or None
        The component names and what this process runs of them, with
        ``mode="dicts"``; None when printed.

    Raises
    ------
    InvalidInputError
        ``mode`` is neither ``"stdout"`` nor ``"dicts"``.
    """
    if mode not in MODES:
        raise InvalidInputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    lines = config()
    if mode == "dicts":
        return lines
    for name, value in lines.items():
        print(f"{name}: {value}")
    return None
