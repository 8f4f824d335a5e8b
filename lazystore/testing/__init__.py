"""Test helpers that ship with lazystore, for its own tests and for users'.

- :mod:`~lazystore.testing.strategies`: hypothesis strategies for dtypes,
  shapes, arrays and basic indexes, and bit-exact comparisons of arrays and
  nested state (needs ``hypothesis``).
- :mod:`~lazystore.testing.rangeserver`: a loopback HTTP server with range
  requests, request counting and injectable faults
  (:mod:`~lazystore.testing.fault_plans`: which request gets which fault).
- :mod:`~lazystore.testing.faults`: failing system calls on purpose, to
  test crash safety.

Nothing here is imported by the library itself.
"""
