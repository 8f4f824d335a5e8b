"""Test helpers that ship with lazystore, for its own tests and for users'.

- :mod:`~lazystore.testing.strategies`: hypothesis strategies for dtypes,
  shapes, arrays and basic indexes, and bit-exact comparisons of arrays and
  nested state (needs ``hypothesis``).
- :mod:`~lazystore.testing.rangeserver`: a loopback HTTP server with range
  requests, request counting and injectable faults.

Nothing here is imported by the library itself.
"""
