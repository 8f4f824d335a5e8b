"""safetensors' rules for ``safe_open(...).get_slice(name)[index]``, on top
of lazystore's basic indexing.

numpy (and so ``ls.open(...).get_slice``) clips a slice that runs past the
end of an axis; safetensors raises, since asking for rows a tensor does not
have is most likely a mistake (a shard of the wrong size, an off-by-one).
The drop-in raises as safetensors does, with its words:

- an explicit start at or past the end, or an explicit stop past the end,
  of a slice (``[:20]`` of 10 rows), or an int past the end:
  ``Error during slicing [:20] with shape [10, 5]: index 19 out of bounds
  for tensor dimension #0 of size 10``;
- a negative int before the start: ``Invalid index -6 for dimension 1 of
  size 5``;
- a list: ``[]`` selects nothing on the first axis (``[0:0]``), any other
  list is ``Non empty lists are not implemented``.

Each is an ``ls.InvalidSelectionError`` (an ``IndexError``). What
safetensors refuses for its own reasons and numpy allows (negative slice
bounds, steps, ``...``, ``None``) keeps numpy's meaning.
"""

from __future__ import annotations

import operator

from lazystore.errors import InvalidSelectionError


def checked(index, shape: tuple[int, ...]):
    """``index`` as lazystore's basic indexing takes it, once safetensors'
    rules above have passed; ``shape`` is the tensor's."""
    if isinstance(index, list):
        if index:
            raise InvalidSelectionError("Non empty lists are not implemented")
        return slice(0, 0)
    items = index if isinstance(index, tuple) else (index,)
    consumed = [it for it in items if it is not None and it is not Ellipsis]
    if len(consumed) > len(shape):
        return index  # lazystore's own error says there are too many indices
    if Ellipsis in items:  # the items after it index the last axes
        after = items[items.index(Ellipsis) + 1:]
        tail = [it for it in after if it is not None]
        consumed = consumed[: len(consumed) - len(tail)] + [slice(None)] * (len(shape) - len(consumed)) + tail
    bounds = [_bounds(it, n, axis) for axis, (it, n) in enumerate(zip(consumed, shape))]
    # safetensors checks the last axis first, so it names the last bad one.
    for axis in reversed(range(len(bounds))):
        start, stop, _ = bounds[axis]
        n = shape[axis]
        if start is not None and start >= n:
            asked = start
        elif stop is not None and stop > n:
            asked = stop - 1
        else:
            continue
        shown = ", ".join(b[2] for b in bounds)
        raise InvalidSelectionError(
            f"Error during slicing [{shown}] with shape {list(shape)}: "
            f"index {asked} out of bounds for tensor dimension #{axis} of size {n}")
    return index


def _bounds(item, n: int, axis: int) -> tuple[int | None, int | None, str]:
    """The explicit, non-negative start and stop ``item`` asks of an axis of
    ``n`` (None where numpy's meaning applies), and how safetensors shows it."""
    if isinstance(item, slice):
        start = _plain(item.start)
        stop = _plain(item.stop)
        shown = f"{'' if item.start is None else item.start}:{'' if item.stop is None else item.stop}"
        return start, stop, shown
    if isinstance(item, bool):
        return None, None, repr(item)  # lazystore's own error: not basic indexing
    try:
        i = operator.index(item)
    except TypeError:
        return None, None, repr(item)  # lazystore's own error: not basic indexing
    if i < 0:
        if i + n < 0:
            raise InvalidSelectionError(f"Invalid index {i} for dimension {axis} of size {n}")
        i += n
    return i, i + 1, str(i)


def _plain(bound) -> int | None:
    """A slice bound safetensors checks: an explicit non-negative int."""
    if bound is None or isinstance(bound, bool):
        return None
    try:
        b = operator.index(bound)
    except TypeError:
        return None
    return b if b >= 0 else None
