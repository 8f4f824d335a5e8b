"""lazystore's own file format (docs/format.md): the byte layout of the
preamble, index and trailer (``layout``), finding and reading a file's index
(``locate``), the validated index and its per-entry rules (``index``), and
the streaming writer (``writer``)."""
