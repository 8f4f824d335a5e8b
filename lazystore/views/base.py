"""The view contract: what every lazy view of a checkpoint is and does.

:class:`~lazystore.views.checkpoint.CheckpointView` (one lazystore or
safetensors file, local or remote), :class:`~lazystore.views.sharded.ShardedView`
(a folder of shards) and :class:`~lazystore.views.arrays.ArraysView`
(tensors of a torch or npz archive, for conversion) all derive from
:class:`ViewBase`, which states the contract and implements its shared
parts once. Code that takes "a checkpoint" (``ls.save`` of a view, the
command line) accepts any of them; ``tests/views/test_contract.py`` runs
one suite against every kind.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lazystore._core import globs
from lazystore._core.globs import Names
from lazystore._core.slicing import selection
from lazystore.errors import ClosedError, InvalidInputError, TensorNotFoundError

if TYPE_CHECKING:
    from typing import Self  # Python 3.11: a name for annotations only

__all__ = ["TensorInfo", "TensorSlice", "ViewBase"]


@dataclass(frozen=True)
class TensorInfo:
    """What a view knows about one tensor without reading its data.

    Attributes
    ----------
    name : str
        The tensor's name.
    dtype : numpy.dtype
        Its dtype.
    shape : tuple of int
        Its shape.
    nbytes : int
        Its decoded size.
    stored_nbytes : int
        The bytes it occupies in storage, padding excluded.
    compression : str or None
        None for a raw tensor, else the codec's name.
    chunk_count : int
        The chunks it is stored in.
    offset : int
        The absolute file offset of its first stored byte (0 where there is
        no file offset).
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    nbytes: int
    stored_nbytes: int
    compression: str | None
    chunk_count: int
    offset: int

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


class ViewBase(abc.ABC, Mapping):
    """A read-only Mapping of tensor names to numpy arrays.

    The contract, for every kind of view:

    - ``view[name]``: the whole tensor. It may be a read-only view of
      storage (a raw tensor of a local file); ``load`` gives writable arrays.
      A missing name raises :class:`~lazystore.errors.TensorNotFoundError`
      (also a ``KeyError``, so ``view.get(name)`` works).
    - ``iter``, ``len``, ``in``, ``keys()``, ``items()``, ``values()``: over
      the view's names, in the view's order (the file's, the index's, or the
      order a selection was asked for).
    - ``info(name)``: a :class:`TensorInfo`, without reading data.
    - ``get_slice(name)``: a :class:`TensorSlice` (``shape``, ``dtype``,
      ``ndim``, ``get_shape()``, ``len``) whose ``[index]`` takes basic
      indexing only and reads only what that index needs.
    - ``select(keys_or_glob)``: a view of some of the tensors, by glob
      pattern (str) or iterable of names. It shares this view's resources
      without owning them: closing this view closes the selection, closing
      the selection leaves this view open.
    - ``load(keys=None, *, verify=True)``: writable arrays of all or some
      tensors (``keys`` as for ``select``), in the order asked for, each
      checked against its checksums unless ``verify=False`` (where the
      storage records checksums: a damaged one raises ChecksumError).
    - ``verify(keys=None)``: names of tensors whose stored bytes fail their
      checksums or do not decode (``[]``: intact), or
      :class:`~lazystore.errors.VerificationUnavailableError` from a view
      whose storage records no checksums.
    - ``metadata`` (the user's), ``system_metadata`` (lazystore's own
      entries), ``nbytes``, ``stored_nbytes``, ``name`` (where it reads
      from), ``format``, ``format_version``.
    - ``close()``, ``closed`` and the context manager. Closing is
      idempotent; after it every method above raises
      :class:`~lazystore.errors.ClosedError`, slices handed out included,
      while arrays already handed out stay valid.

    A kind provides ``__getitem__``, ``info``, ``get_slice``, ``load``,
    ``verify``, ``_selection`` (the sub-view ``select`` returns) and
    ``_release`` (what closing the owning view frees), and sets ``name``,
    ``_metadata`` and ``_system_metadata``. It keeps its names in
    ``_table``, a Mapping of name to whatever the kind needs to find the
    tensor, in the view's order: iteration, ``len`` and ``in`` are that
    Mapping's own, so they cost nothing per name. Its methods start with
    :meth:`_lookup` (one name) or :meth:`_wanted` (``keys``), which raise
    ClosedError once the view is closed.
    """

    format: str = "lazystore"
    format_version: tuple = ()
    name: str
    _metadata: dict
    _system_metadata: dict
    _table: Mapping
    # The view this one was selected from; None for the view that owns the
    # resources (the one that opened them).
    _parent: ViewBase | None = None
    _closed: bool = False

    # -- what each kind provides ----------------------------------------------------

    @abc.abstractmethod
    def __getitem__(self, name: str) -> np.ndarray:
        """The whole tensor."""

    @abc.abstractmethod
    def info(self, name: str) -> TensorInfo:
        """The dtype, shape, sizes and codec of a tensor, without reading its data.

        Parameters
        ----------
        name : str
            The tensor's name.

        Returns
        -------
        TensorInfo
            What the view knows of the tensor.

        Raises
        ------
        TensorNotFoundError
            No tensor has that name.
        ClosedError
            The view is closed.
        """

    @abc.abstractmethod
    def get_slice(self, name: str) -> TensorSlice:
        """A handle whose ``[index]`` reads only what basic indexing needs.

        Parameters
        ----------
        name : str
            The tensor's name.

        Returns
        -------
        TensorSlice
            The handle; it raises ClosedError once the view is closed.

        Raises
        ------
        TensorNotFoundError
            No tensor has that name.
        ClosedError
            The view is closed.
        """

    @abc.abstractmethod
    def load(self, keys: Names | None = None, *, verify: bool = True) -> dict[str, np.ndarray]:
        """Writable arrays of some or all tensors, checked unless ``verify=False``.

        Parameters
        ----------
        keys : str or iterable of str, optional
            A glob pattern (str) or the names to load; None (the default)
            loads every tensor.
        verify : bool, optional
            Check each tensor against its checksums, where the storage
            records them (the default).

        Returns
        -------
        dict of str to numpy.ndarray
            The arrays, in the order asked for.

        Raises
        ------
        TensorNotFoundError
            An unknown name, or a glob that matches nothing.
        ChecksumError
            A tensor's stored bytes fail their checksums.
        ClosedError
            The view is closed.
        """

    @abc.abstractmethod
    def verify(self, keys: Names | None = None) -> list[str]:
        """Names of tensors whose stored bytes fail their checks.

        Parameters
        ----------
        keys : str or iterable of str, optional
            A glob pattern (str) or the names to check; None (the default)
            checks every tensor.

        Returns
        -------
        list of str
            The names of the tensors whose stored bytes fail their checksums
            or do not decode; ``[]`` when all are intact.

        Raises
        ------
        VerificationUnavailableError
            The storage records no checksums (a safetensors file).
        TensorNotFoundError
            An unknown name, or a glob that matches nothing.
        ClosedError
            The view is closed.
        """

    @abc.abstractmethod
    def _selection(self, table: dict) -> ViewBase:
        """A view of the same kind over ``table`` (name -> this kind's
        locator, a part of ``self._table``), sharing this view's resources
        and owning none: :meth:`select` makes it a child of this view."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Free the resources: called once, by :meth:`close` of the owning view."""

    # -- closing -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the view, or the view it was selected from, is closed."""
        parent = self._parent
        return self._closed or (parent is not None and parent.closed)

    def close(self) -> None:
        """Close the view; a second call does nothing.

        The view that opened the resources frees them, which closes its
        selections too; a selection closes only itself. Arrays already
        handed out stay valid.
        """
        if not self._closed:
            self._closed = True
            if self._parent is None:
                self._release()

    def _check_open(self) -> None:
        if self._closed or (self._parent is not None and self._parent.closed):  # self.closed, inlined: per read
            raise ClosedError(f"checkpoint {self.name!r} is closed")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- names ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        self._check_open()
        return iter(self._table)

    def __len__(self) -> int:
        self._check_open()
        return len(self._table)

    def __contains__(self, name: object) -> bool:
        self._check_open()
        try:
            return name in self._table
        except TypeError:  # unhashable: no tensor has that name
            return False

    def _lookup(self, name: str) -> Any:
        """What ``_table`` holds for ``name``, once the view is known to be open."""
        self._check_open()
        try:
            return self._table[name]
        except (KeyError, TypeError):
            raise self._missing(name) from None

    def _missing(self, name: object) -> TensorNotFoundError:
        return TensorNotFoundError(f"no tensor named {name!r} in {self.name}")

    def _resolve(self, keys_or_glob: Names) -> list[str]:
        """Names from a glob pattern (str) or an iterable of names (each must exist)."""
        self._check_open()
        if isinstance(keys_or_glob, str):
            return globs.matching(self._table, keys_or_glob, self.name)
        if not isinstance(keys_or_glob, Iterable):
            raise InvalidInputError(f"expected a glob pattern or an iterable of names, got {keys_or_glob!r}")
        names = list(keys_or_glob)
        table = self._table
        for n in names:
            try:
                found = n in table
            except TypeError:
                found = False
            if not found:
                raise self._missing(n)
        return names

    def _wanted(self, keys: Names | None) -> list[str]:
        """The names ``keys`` asks for: all of them when None, else as :meth:`_resolve`."""
        if keys is None:
            self._check_open()
            return list(self._table)
        return self._resolve(keys)

    def select(self, keys_or_glob: Names) -> ViewBase:
        """A view of some tensors: a glob pattern (str) or an iterable of names.

        The selection shares this view's resources without owning them:
        closing this view closes the selection too; closing the selection
        alone leaves this view open.

        Parameters
        ----------
        keys_or_glob : str or iterable of str
            A glob pattern (str), or the names to keep, in the order the
            selection gives them; an empty list gives an empty view.

        Returns
        -------
        ViewBase
            A view of the same kind over the selected tensors.

        Raises
        ------
        TensorNotFoundError
            A glob that matches nothing, or an unknown name.
        InvalidInputError
            ``keys_or_glob`` is neither a str nor an iterable.
        ClosedError
            The view is closed.
        """
        table = self._table
        sub = self._selection({n: table[n] for n in self._resolve(keys_or_glob)})
        sub._parent = self
        return sub

    # -- metadata and sizes ------------------------------------------------------------

    @property
    def metadata(self) -> dict:
        """The JSON metadata given at save time (the same dict on every access)."""
        self._check_open()
        return self._metadata

    @property
    def system_metadata(self) -> dict:
        """lazystore's own metadata entries (keys starting with ``__lazystore``).

        Such as the nested structure of a training checkpoint.
        """
        self._check_open()
        return self._system_metadata

    @property
    def nbytes(self) -> int:
        """Decoded size of the tensors in this view."""
        return sum(self.info(n).nbytes for n in self._wanted(None))

    @property
    def stored_nbytes(self) -> int:
        """Bytes the tensors of this view occupy in storage."""
        return sum(self.info(n).stored_nbytes for n in self._wanted(None))


class TensorSlice:
    """``view.get_slice(name)``: index it like a numpy array to read part of a tensor.

    Every kind of view returns one. It takes basic indexing only (ints,
    slices, Ellipsis, None; anything else raises
    :class:`~lazystore.errors.InvalidSelectionError`, an ``IndexError``) and
    hands ``read(index, picks)`` the index and the range of elements it
    picks on each axis, so the view reads just those (a raw tensor of a
    local file gives a read-only view, a compressed one decodes only the
    chunks the index touches). Indexing a slice of a closed view raises
    :class:`~lazystore.errors.ClosedError`.

    Parameters
    ----------
    view : ViewBase
        The view it reads from; closing it closes the slice.
    name : str
        The tensor's name.
    dtype : numpy.dtype
        The tensor's dtype.
    shape : tuple of int
        The tensor's shape.
    read : callable
        ``read(index, picks)``: the part of the tensor ``index`` selects,
        given the range of elements it picks on each axis.
    """

    __slots__ = ("_read", "_view", "dtype", "name", "shape")

    def __init__(self, view: ViewBase, name: str, dtype: np.dtype, shape: tuple[int, ...],
                 read: Callable[[Any, list[range]], np.ndarray]) -> None:
        self._view = view
        self._read = read
        self.name = name
        self.shape = shape
        self.dtype = dtype

    @property
    def ndim(self) -> int:
        """The number of axes."""
        return len(self.shape)

    def get_shape(self) -> list[int]:
        """The shape as a list (safetensors' spelling of ``shape``).

        Returns
        -------
        list of int
            The tensor's shape.
        """
        return list(self.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        self._view._check_open()
        return self._read(index, selection(index, self.shape))

    def __repr__(self) -> str:
        return f"<TensorSlice {self.name!r} {self.dtype} {self.shape}>"
