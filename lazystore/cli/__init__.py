"""The ``lazystore`` command line (also ``python -m lazystore``)."""

from lazystore.cli.main import main

__all__ = ["main"]
