"""Basic numpy indexing, decoded into one range of picks per axis.

``get_slice`` needs to know which elements an index touches before it reads
anything; numpy then applies the very same index to the decoded bytes, so
the result is exactly what ``array[index]`` would give.
"""

from __future__ import annotations

import operator

from lazystore.errors import InvalidSelectionError


def rebase(index) -> tuple:
    """The index that, applied to a box holding exactly ``index``'s picks
    with every axis ascending (``ChunkGrid.slice_plan``), gives what
    ``array[index]`` gives: ints pick the box's only element of their axis,
    slices take all of it (reversed for a negative step); Ellipsis and None
    stay, so numpy shapes the result exactly as it would (an Ellipsis makes
    even an all-int index give an array). ``index`` must have passed
    :func:`selection`."""
    items = index if isinstance(index, tuple) else (index,)
    return tuple(it if it is None or it is Ellipsis
                 else (slice(None, None, -1) if it.step is not None and it.step < 0 else slice(None))
                 if isinstance(it, slice) else 0
                 for it in items)


def selection(index, shape: tuple[int, ...]) -> list[range]:
    """One range of selected indices per axis for a basic index.

    Accepts ints (negative counts from the end), slices with any step,
    Ellipsis and None (which adds an axis and selects nothing by itself).
    Raises InvalidSelectionError for anything else, like numpy's IndexError.
    """
    items = index if isinstance(index, tuple) else (index,)
    if sum(1 for it in items if it is Ellipsis) > 1:
        raise InvalidSelectionError("an index can only have a single ellipsis ('...')")
    consumed = [it for it in items if it is not None and it is not Ellipsis]
    if len(consumed) > len(shape):
        raise InvalidSelectionError(
            f"too many indices: tensor is {len(shape)}-dimensional, but {len(consumed)} were indexed"
        )
    expanded: list = []
    for it in items:
        if it is Ellipsis:
            expanded.extend([slice(None)] * (len(shape) - len(consumed)))
        elif it is not None:
            expanded.append(it)
    expanded.extend([slice(None)] * (len(shape) - len(expanded)))
    return [_axis_range(it, n, axis) for axis, (it, n) in enumerate(zip(expanded, shape))]


def _axis_range(item, length: int, axis: int) -> range:
    if isinstance(item, slice):
        return range(*item.indices(length))
    try:
        if isinstance(item, bool):  # numpy treats bools as masks, not ints
            raise TypeError
        i = operator.index(item)
    except TypeError:
        raise InvalidSelectionError(
            f"get_slice supports basic indexing only (ints, slices, Ellipsis, None), "
            f"got {type(item).__name__}; read the tensor with ck[name] for advanced indexing"
        ) from None
    if not -length <= i < length:
        raise InvalidSelectionError(f"index {i} is out of bounds for axis {axis} with size {length}")
    i %= length
    return range(i, i + 1)
