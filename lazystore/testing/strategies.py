"""Hypothesis strategies for lazystore's test suite.

Only the tests import this module, so it imports hypothesis unconditionally.

- :func:`dtypes`: every dtype the format stores (``lazystore.DTYPES``).
- :func:`shapes`: small shapes of 0 to 4 dimensions, 0-d and zero-size included.
- :func:`arrays`: arrays of those dtypes built from random bits, so floats
  include NaNs (of any payload), infinities, subnormals and -0.0; the special
  values are also injected explicitly. Some arrays are low-entropy (values
  drawn from a small pool) so that compression actually kicks in.
- :func:`basic_indices`: basic numpy indices for a shape (ints, negative
  ones too, slices with any step, Ellipsis, None, and tuples of those).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import EllipsisType
from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import strategies as st

from lazystore._core.dtypes import DTYPES

__all__ = ["DTYPE_LIST", "FLOAT_DTYPES", "dtypes", "shapes", "arrays", "random_array", "basic_indices",
           "same_bits", "reaches_mmap", "same_tree"]

DTYPE_LIST: list[np.dtype] = [spec.dtype for spec in DTYPES]
FLOAT_DTYPES: frozenset = frozenset(spec.dtype for spec in DTYPES if spec.is_float)

_SPECIALS = (math.nan, math.inf, -math.inf, -0.0, 0.0)
_MODES = ("bits", "pool", "zeros")
# A basic numpy index: an int, a slice, Ellipsis or None (a new axis), or a tuple of them.
_Item = int | slice | EllipsisType | None
BasicIndex = _Item | tuple[_Item, ...]


def dtypes() -> st.SearchStrategy[np.dtype]:
    """Every dtype lazystore can store (little-endian, as stored).

    Returns
    -------
    hypothesis.strategies.SearchStrategy of numpy.dtype
        A strategy drawing from ``lazystore.DTYPES``.
    """
    return st.sampled_from(DTYPE_LIST)


@st.composite
def shapes(draw: st.DrawFn, *, max_dims: int = 4, max_side: int = 6,
           max_elements: int | None = None) -> tuple[int, ...]:
    """Small shapes: 0-d up to ``max_dims`` axes; about one in six has a 0 axis.

    Parameters
    ----------
    max_dims : int, optional
        The most axes.
    max_side : int, optional
        The largest length of an axis.
    max_elements : int, optional
        The most elements: the largest axes are halved until the shape is
        that small.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of tuple of int
        The shapes.
    """
    ndim = draw(st.sampled_from([n for n in (0, 1, 1, 2, 2, 2, 3, 3, 4) if n <= max_dims]))
    # sampled_from is uniform, where integers() favours tiny values.
    dims = [draw(st.sampled_from(range(1, max_side + 1))) for _ in range(ndim)]
    if ndim and draw(st.integers(0, 5)) == 0:
        dims[draw(st.integers(0, ndim - 1))] = 0
    if max_elements is not None:
        # Shrink the largest axes until the tensor is small enough.
        while math.prod(dims) > max_elements:
            i = int(np.argmax(dims))
            dims[i] = max(1, dims[i] // 2)
    return tuple(dims)


def random_array(dtype: npt.DTypeLike, shape: tuple[int, ...], seed: int, mode: str = "bits",
                 special_fraction: float = 0.1) -> np.ndarray:
    """A deterministic array of ``dtype`` and ``shape`` from ``seed``.

    Bool arrays hold only 0 and 1.

    Parameters
    ----------
    dtype : numpy.dtype or str
        The array's dtype.
    shape : tuple of int
        The array's shape.
    seed : int
        The seed of the random bits: the same seed gives the same array.
    mode : {"bits", "pool", "zeros"}, optional
        "bits" (every byte random), "pool" (each element one of four random
        bit patterns: compressible), or "zeros" (all zero bits, with
        specials).
    special_fraction : float, optional
        The fraction of the elements of a float dtype that get NaN, +-inf
        and -0.0 injected.

    Returns
    -------
    numpy.ndarray
        The array.

    Raises
    ------
    ValueError
        An unknown ``mode``.
    """
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    item = dtype.itemsize
    if mode == "bits":
        raw = rng.integers(0, 256, size=n * item, dtype=np.uint8)
    elif mode == "pool":
        pool = rng.integers(0, 256, size=(4, item), dtype=np.uint8)
        raw = pool[rng.integers(0, 4, size=n)].reshape(-1)
    elif mode == "zeros":
        raw = np.zeros(n * item, dtype=np.uint8)
    else:
        raise ValueError(f"unknown mode {mode!r}")
    if dtype == np.bool_:
        raw = raw & np.uint8(1)
    arr = raw.view(dtype).reshape(shape)
    if dtype in FLOAT_DTYPES and n:
        flat = arr.reshape(-1)
        where = rng.random(n) < special_fraction
        picks = rng.integers(0, len(_SPECIALS), size=n)
        specials = np.array(_SPECIALS, dtype=np.float64)
        with np.errstate(all="ignore"):
            if dtype.kind == "c":
                imag = rng.integers(0, len(_SPECIALS), size=n)
                values = np.empty(int(where.sum()), dtype=dtype)
                values.real = specials[picks[where]]
                values.imag = specials[imag[where]]
            else:
                # float8_e4m3fn has no infinity: the cast makes those NaN.
                values = specials[picks[where]].astype(dtype)
        flat[where] = values
    return arr


@st.composite
def arrays(draw: st.DrawFn, dtype: npt.DTypeLike | None = None,
           shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None = None, *,
           modes: Sequence[str] = _MODES, max_dims: int = 4, max_side: int = 6,
           max_elements: int | None = None) -> np.ndarray:
    """Arrays of every supported dtype (or ``dtype``) and small shapes (or ``shape``).

    Parameters
    ----------
    dtype : numpy.dtype or str, optional
        The dtype of every array; by default drawn from :func:`dtypes`.
    shape : tuple of int or SearchStrategy, optional
        The shape, or a strategy for it; by default drawn from :func:`shapes`.
    modes : sequence of str, optional
        The modes of :func:`random_array` to draw from.
    max_dims, max_side, max_elements : int, optional
        As for :func:`shapes`, when ``shape`` is not given.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of numpy.ndarray
        The arrays, built by :func:`random_array`.
    """
    if dtype is None:
        dtype = draw(dtypes())
    if shape is None:
        shape = draw(shapes(max_dims=max_dims, max_side=max_side, max_elements=max_elements))
    elif isinstance(shape, st.SearchStrategy):
        shape = draw(shape)
    mode = draw(st.sampled_from(modes))
    seed = draw(st.integers(0, 2**32 - 1))
    fraction = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    return random_array(dtype, shape, seed, mode, fraction)


def _int_index(size: int) -> st.SearchStrategy:
    ints = st.integers(-size, size - 1)
    return st.one_of(ints, ints.map(np.int64), ints.map(np.intp))


def _bound(size: int) -> st.SearchStrategy:
    return st.none() | st.integers(-size - 3, size + 3)


def _slice(size: int) -> st.SearchStrategy:
    nonzero = st.builds(lambda m, negative: -m if negative else m, st.integers(1, 4), st.booleans())
    step = st.none() | nonzero | st.sampled_from([size + 1, -(size + 1)])
    return st.builds(slice, _bound(size), _bound(size), step)


def _axis_item(size: int) -> st.SearchStrategy:
    if size == 0:
        return _slice(size)  # no int is in range
    return st.one_of(_int_index(size), _slice(size))


@st.composite
def basic_indices(draw: st.DrawFn, shape: Sequence[int], *, allow_none: bool = True,
                  allow_ellipsis: bool = True) -> BasicIndex:
    """A basic numpy index that is valid for ``shape`` (never out of range).

    Leading axes are indexed explicitly, then optionally an Ellipsis and
    items for trailing axes; Nones are sprinkled in. A one-item index is
    sometimes given bare rather than as a 1-tuple.

    Parameters
    ----------
    shape : sequence of int
        The shape the index is for.
    allow_none : bool, optional
        Sprinkle in Nones (new axes).
    allow_ellipsis : bool, optional
        Sometimes use an Ellipsis.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        The indexes: ints, slices, Ellipsis, None, or tuples of them.
    """
    shape = tuple(shape)
    ndim = len(shape)
    use_ellipsis = allow_ellipsis and draw(st.booleans())
    lead = draw(st.integers(0, ndim))
    trail = draw(st.integers(0, ndim - lead)) if use_ellipsis else 0
    items = [draw(_axis_item(shape[a])) for a in range(lead)]
    if use_ellipsis:
        items.append(Ellipsis)
        items += [draw(_axis_item(shape[a])) for a in range(ndim - trail, ndim)]
    if allow_none:
        for _ in range(draw(st.integers(0, 2))):
            items.insert(draw(st.integers(0, len(items))), None)
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


# -- assertions shared by the tests ---------------------------------------------


def same_bits(a: npt.ArrayLike, b: npt.ArrayLike) -> bool:
    """Same dtype, shape and bytes (so NaNs compare equal to themselves).

    Parameters
    ----------
    a, b : array_like
        The arrays to compare.

    Returns
    -------
    bool
        Whether they are the same bits.
    """
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes(order="C") == b.tobytes(order="C")


def reaches_mmap(arr: np.ndarray) -> bool:
    """Whether the ``.base`` chain of ``arr`` ends in a memory map (a zero-copy view).

    Parameters
    ----------
    arr : numpy.ndarray
        The array.

    Returns
    -------
    bool
        True when it is a view of a memory map.
    """
    import mmap

    obj = arr
    for _ in range(100):
        if isinstance(obj, mmap.mmap):
            return True
        if isinstance(obj, memoryview):
            obj = obj.obj
            continue
        base = getattr(obj, "base", None)
        if base is None:
            return False
        obj = base
    return False


def same_tree(a: Any, b: Any, path: str = "") -> None:  # any nested states: compared by type, then duck-typed
    """Assert that two nested states are identical.

    That is the same container and leaf types, the same key types and
    order, and the same bits in every tensor and float (so NaNs and -0.0
    count). Torch tensors must also agree in dtype, device, subclass and
    requires_grad.

    Parameters
    ----------
    a, b : object
        The nested states.
    path : str, optional
        Where ``a`` and ``b`` sit in the states compared, for the message.

    Raises
    ------
    AssertionError
        They differ; the message says where.
    """
    import struct

    where = path or "the top level"
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], f"{where}: keys {list(a)} != {list(b)}"
        assert getattr(a, "_metadata", None) == getattr(b, "_metadata", None), f"{where}: _metadata differs"
        for k in a:
            same_tree(a[k], b[k], f"{path}/{k}" if path else str(k))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            same_tree(x, y, f"{path}/{i}" if path else str(i))
    elif isinstance(a, (np.ndarray, np.generic)):
        assert same_bits(a, b), f"{where}: arrays differ"
    elif type(a) is float:
        assert struct.pack("<d", a) == struct.pack("<d", b), f"{where}: {a!r} != {b!r}"
    elif type(a).__module__.startswith("torch"):
        from lazystore._core import torch_arrays as torch_adapter

        assert (a.dtype, a.shape, a.device, a.requires_grad) == (b.dtype, b.shape, b.device, b.requires_grad), \
            f"{where}: {a.dtype} {tuple(a.shape)} {a.device} != {b.dtype} {tuple(b.shape)} {b.device}"
        assert same_bits(torch_adapter.to_numpy(a), torch_adapter.to_numpy(b)), f"{where}: tensors differ"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"
