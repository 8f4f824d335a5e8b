"""The name and version lazystore is installed under, and the install and rebuild
hints that use them.

The import name is ``lazystore``, but ``lazystore`` on the package index is
an unrelated project: asking pip for ``lazystore`` with the torch extra
installs that one (pip only warns that it has no such extra), and
``import lazystore`` then imports the wrong library. So the distribution has its
own name, pyproject.toml's ``[project] name``, and every message that tells
a user what to install builds its hint here, from that one constant
(tests/_core/test_distribution.py checks the two agree and that no hint is
spelled anywhere else).
"""

from __future__ import annotations

DISTRIBUTION = "lazystore-ml"
# pyproject.toml's [project] version (tests/_core/test_distribution.py checks
# they agree); lazystore.__version__ re-exports it.
VERSION = "0.1.0"


def install_hint(extra: str, packages: str) -> str:
    """What to run for the optional ``extra``: its third-party ``packages``
    themselves, or lazystore with the extra. Naming the packages first keeps
    the hint right however lazystore itself was installed (from a checkout,
    a wheel, or the index)."""
    return f"pip install {packages} (or lazystore with the extra: pip install '{DISTRIBUTION}[{extra}]')"


def package_hint(packages: str) -> str:
    """What to run for third-party ``packages`` that no extra of lazystore's
    installs (a library lazystore works with only when the user has it)."""
    return f"pip install {packages}"



def rebuild_hint() -> str:
    """What to run where lazystore's C kernels are a stale build: an
    editable install (a checkout) builds them in place and keeps them
    across later checkouts."""
    return "pip install -e . (or python setup.py build_ext --inplace) in the checkout"
