"""``safe_open``: safetensors' lazy file handle, over anything ``ls.open``
reads (lazystore files, safetensors files, sharded folders), raw or
compressed.

It is built on the public view API alone (``ls.open``, ``load``,
``get_slice``, ``info``, ``metadata``). Names are sorted in ``keys()`` as
safetensors sorts them; ``offset_keys()`` gives the file's order. Metadata
comes back as safetensors gives it, str to str (None when there is none):
lazystore's JSON values that are not strings are given as their compact
JSON text, so ``json.loads`` recovers them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from lazystore._core import staging, ties, torch_arrays
from lazystore._core.dtypes import spec_for
from lazystore._core.torch_reads import tensors_of
from lazystore.errors import ClosedError, InvalidInputError, TensorNotFoundError
from lazystore.torch import files, slice_rules

if TYPE_CHECKING:
    import torch

    from lazystore.views.base import TensorSlice

# safetensors' spellings of the frameworks lazystore gives tensors for.
FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


class safe_open:  # lower case: safetensors' name, so migrating is an import change
    """safetensors' lazy file handle, over anything ``ls.open`` reads.

    ``with safe_open(path, framework="pt", device="cpu") as f:`` then
    ``f.keys()``, ``f.get_tensor(name)``, ``f.get_slice(name)[...]``,
    ``f.metadata()``.

    Tensors from ``get_tensor`` are writable and checked against their
    checksums (``get_tensor(name, verify=False)`` skips that); on the CPU a
    raw tensor of a local file is a copy-on-write view of it, so writing to
    it never changes the file. ``get_slice`` reads only the chunks its index
    touches, unchecked for raw tensors (zero-copy, as ``ck[name]``;
    compressed chunks are always checked).

    A signed (or pinned) checkpoint has its signature and index checked
    first, and then every read, ``get_slice`` included, checks the chunks it
    touches against their digests (``verify=False`` is ignored there: the
    signature vouches only for checked bytes).

    Parameters
    ----------
    filename : str or os.PathLike
        A local path or an fsspec URL: anything ``ls.open`` opens.
    framework : str, optional
        "pt" (torch tensors on ``device``) or "np" (numpy arrays, on the
        CPU); "torch", "pytorch" and "numpy" are accepted too.
    device : str, int or torch.device, optional
        Where "pt" tensors go ("cpu", "cuda:0", an int, a torch.device).
    backend : str, optional
        safetensors' I/O strategy, "mmap" or "pread": accepted, and
        lazystore chooses its own.
    encryption_key : optional
        The key of an encrypted file, as ``ls.open`` takes it.
    public_key : optional
        Check the checkpoint's signature with this key, as ``ls.open`` does.
    signature : str or os.PathLike, optional
        The signature ``public_key`` checks (default ``FILE.sig``).
    index_sha256 : str, optional
        A pinned SHA-256 of the file's index, as ``ls.open`` takes it.

    Raises
    ------
    InvalidInputError
        An unknown ``framework`` or ``backend``, or a device other than the
        CPU for "np".
    FileNotFoundError
        No file at ``filename``.
    MissingDependencyError
        ``framework="pt"`` without torch installed.
    """

    def __init__(self, filename: str | os.PathLike[str], framework: str = "pt",
                 device: str | int | torch.device | None = "cpu", *, backend: str = "mmap",
                 encryption_key: Any = None, public_key: Any = None, signature: str | os.PathLike[str] | None = None,
                 index_sha256: str | None = None) -> None:
        self._framework = FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if self._framework is None:
            raise InvalidInputError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
        if backend not in files.BACKENDS:
            raise InvalidInputError(f"backend must be one of {', '.join(files.BACKENDS)}, got {backend!r}")
        if self._framework == "pt":
            torch_arrays.require("framework='pt' gives PyTorch tensors")
            self._device = torch_arrays.device(device, "device")
        elif device is None or torch_arrays.is_cpu(device):
            self._device = None
        else:
            raise InvalidInputError(f"framework='np' gives numpy arrays, which live on the CPU; got device={device!r}")
        self._view = files.opened(filename, encryption_key=encryption_key, public_key=public_key,
                                  signature=signature, index_sha256=index_sha256)
        try:
            self._names = list(self._view)
            self._aliases = ties.read_aliases(self._view.system_metadata, self._names)
        except BaseException:
            self._view.close()
            raise

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file; tensors already handed out stay valid."""
        self._view.close()

    def keys(self) -> list[str]:
        """Every tensor name, sorted (as safetensors sorts them).

        Returns
        -------
        list of str
            The names.

        Raises
        ------
        ClosedError
            The handle is closed.
        """
        return sorted(self.offset_keys())

    def offset_keys(self) -> list[str]:
        """Every tensor name in the file's order.

        Returns
        -------
        list of str
            The names, those stored as another tensor's alias last.

        Raises
        ------
        ClosedError
            The handle is closed.
        """
        self._check()
        return self._names + list(self._aliases)

    def metadata(self) -> dict[str, str] | None:
        """The metadata as str to str, as safetensors gives it.

        Returns
        -------
        dict of str to str, or None
            The metadata (JSON values that are not strings as their compact
            JSON text), or None when there is none.
        """
        meta = self._view.metadata
        if not meta:
            return None
        return {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"), ensure_ascii=False)
                for k, v in meta.items()}

    def get_tensor(self, name: str, *, verify: bool = True) -> torch.Tensor | np.ndarray:
        """The whole tensor: writable, and on the CPU zero-copy for raw tensors.

        Parameters
        ----------
        name : str
            The tensor's name.
        verify : bool, optional
            Check it against its checksums.

        Returns
        -------
        torch.Tensor or numpy.ndarray
            The tensor, in the handle's framework.

        Raises
        ------
        TensorNotFoundError
            No tensor has that name.
        ChecksumError
            The tensor is damaged.
        ClosedError
            The handle is closed.
        """
        target = self._target(name)
        return self._convert(self._view.load([target], verify=verify)[target])

    def get_tensors(self, *, verify: bool = True) -> dict[str, Any]:
        """Every tensor, in the file's order.

        Parameters
        ----------
        verify : bool, optional
            Check them as :meth:`get_tensor` checks them.

        Returns
        -------
        dict of str to torch.Tensor or numpy.ndarray
            ``{name: tensor}``, in the handle's framework.

        Raises
        ------
        ChecksumError
            A tensor is damaged.
        ClosedError
            The handle is closed.
        """
        self._check()
        if self._framework == "np":
            out = self._view.load(self._names, verify=verify)
        else:
            out = tensors_of(self._view, self._names, self._device, verify=verify)
        out.update((alias, out[target]) for alias, target in self._aliases.items())
        return out

    def get_slice(self, name: str) -> SafeSlice:
        """A handle whose ``[index]`` reads only what basic indexing needs.

        Parameters
        ----------
        name : str
            The tensor's name.

        Returns
        -------
        SafeSlice
            The tensor's slice handle.

        Raises
        ------
        TensorNotFoundError
            No tensor has that name.
        ClosedError
            The handle is closed.
        """
        target = self._target(name)
        return SafeSlice(self._view.get_slice(target), self._convert)

    # -- internals -----------------------------------------------------------------

    def _check(self) -> None:
        if self._view.closed:
            raise ClosedError(f"{self._view.name} is closed")

    def _target(self, name: str) -> str:
        """The stored tensor holding ``name`` (itself, or what it aliases)."""
        self._check()
        target = self._aliases.get(name, name)
        if target not in self._view:
            raise TensorNotFoundError(f"no tensor named {name!r} in {self._view.name}")
        return target

    def _convert(self, arr: np.ndarray) -> Any:
        """A loaded array as the framework's tensor."""
        if self._framework == "np":
            return arr
        with staging.Placement(self._device, arr.nbytes) as place:
            return place.tensor(arr)


class SafeSlice:
    """``f.get_slice(name)``: ``get_shape()``, ``get_dtype()`` and ``[index]``.

    The index is basic numpy indexing (ints, slices, Ellipsis, None), on the
    shape ``get_shape()`` gives, with safetensors' rules on top
    (:mod:`.slice_rules`): a slice past the end of an axis raises, and
    ``[]`` selects nothing. For FP4 (``float4_e2m1fn_x2``, "F4") that is
    torch's shape, in bytes of two values, where safetensors gives the count
    of values.

    Parameters
    ----------
    tensor_slice : TensorSlice
        The view's slice of the tensor (``ck.get_slice(name)``).
    convert : callable
        Turns a numpy array read from it into the framework's tensor.
    """

    __slots__ = ("_convert", "_slice")

    def __init__(self, tensor_slice: TensorSlice, convert: Callable[[np.ndarray], Any]) -> None:
        self._slice = tensor_slice
        self._convert = convert

    def get_shape(self) -> list[int]:
        """The tensor's shape, as safetensors gives it.

        Returns
        -------
        list of int
            The shape (for FP4, torch's: in bytes of two values).
        """
        return list(self._slice.shape)

    def get_dtype(self) -> str:
        """The tensor's dtype, as safetensors names it.

        Returns
        -------
        str
            safetensors' dtype string ("F32", "BF16", ...); lazystore's name
            for the dtypes safetensors lacks (complex128, complex32).
        """
        spec = spec_for(self._slice.dtype)  # a stored tensor's dtype is always in the table
        return spec.safetensors or spec.name

    def __getitem__(self, index: Any) -> Any:
        part = np.asarray(self._slice[slice_rules.checked(index, self._slice.shape)])
        if not part.flags.writeable:  # a view of the shared, read-only map: copy what was asked for
            part = part.copy()
        return self._convert(part)

    def __repr__(self) -> str:
        return f"<SafeSlice {self._slice.name!r} {self.get_dtype()} {self.get_shape()}>"
