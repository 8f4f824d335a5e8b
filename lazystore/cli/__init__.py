"""The ``lazystore`` command line (also ``python -m lazystore``).

- :mod:`~lazystore.cli.main`: the argument parser and the entry point, which
  turns failures into exit codes and one-line messages.
- :mod:`~lazystore.cli.commands`: info, ls, verify, convert and merge.
- :mod:`~lazystore.cli.diff`: diff and its value comparison.
- :mod:`~lazystore.cli.inputs` / :mod:`~lazystore.cli.outputs`: opening what
  a command reads; choosing and opening what it writes.
- :mod:`~lazystore.cli.text`, :mod:`~lazystore.cli.errors`,
  :mod:`~lazystore.cli.progress`: writing values for people, failures as
  one line, progress bars on stderr.

Only :func:`main` is exported: it is the console script's entry point.
"""

from lazystore.cli.main import main

__all__ = ["main"]
