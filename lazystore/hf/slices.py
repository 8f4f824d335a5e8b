"""The state dict ``from_pretrained`` hands transformers, read so that memory
peaks at about the weights, and checked.

transformers reads its own safetensors files lazily: it puts
``safe_open(...).get_slice(name)`` objects in the state dict and reads each
with ``[...]`` when it places the parameter (``core_model_loading.
_materialize_copy``), a few at a time from its loader threads, into a model
built on the meta device. The state dict here keeps that contract:

- raw tensors are read together, as views of one copy-on-write map of the
  file (zero-copy and writable, as safetensors' are), checked on the way;
  one map, because every map of its own would bring its neighbours' pages
  along and count them again in the process's resident memory;
- compressed tensors are handles (:class:`CheckedSlice`: ``get_shape()``,
  ``get_dtype()``, ``[...]``) decoded when transformers reads them, from
  a view that reads the file with ``pread`` (its compressed pages are then
  never mapped into the process: only the decoded tensors count).

Every tensor is checked against its checksums (a damaged one raises
``ls.ChecksumError`` naming the file and the tensor) unless
``verify=False``; compressed chunks are always checked.
"""

from __future__ import annotations

from contextlib import contextmanager

from lazystore._core import torch_arrays
from lazystore._core.dtypes import spec_for
from lazystore.errors import ChecksumError
from lazystore.hf.offload import FileWeights
from lazystore.torch import load_file


class Weights:
    """The tensors of lazystore weights (a file, or a sharded folder) as
    transformers wants them; a context manager (closes the file). Names,
    ties and single reads are :class:`~lazystore.hf.offload.FileWeights`'
    (compressed tensors through ``pread``)."""

    def __init__(self, path, *, verify: bool = True):
        self.path = path
        self.verify = verify
        self._files = FileWeights(path, verify=verify)

    def __enter__(self) -> Weights:
        return self

    def __exit__(self, *exc) -> None:
        self._files.close()

    def names(self) -> list[str]:
        """Every name, sorted as safetensors' ``keys()`` (tied names included:
        transformers ties them again)."""
        return sorted(self._files)

    def info(self, name: str):
        return self._files.info(name)

    def state_dict(self, *, instead=None) -> dict:
        """``{name: tensor or CheckedSlice}`` for every name, but where
        ``instead`` gives what to hand transformers for a name (nothing of
        those is read)."""
        instead = instead or {}
        wanted = [n for n in self.names() if n not in instead]
        raw = [n for n in wanted if self.info(n).compression is None]
        with naming_file(self.path):
            mapped = load_file(self.path, keys=raw, verify=self.verify) if raw else {}
        out = {n: mapped[n] if n in mapped else CheckedSlice(self, n) for n in wanted}
        out.update((n, v) for n, v in instead.items() if n in self._files)
        return out

    def read(self, name: str):
        """The whole tensor ``name``, checked unless ``verify=False``."""
        with naming_file(self.path):
            return self._files[name]

    def torch_dtype(self, name: str):
        return torch_arrays.torch_dtype_of(self.info(name).dtype)


@contextmanager
def naming_file(path):
    """Re-raise a ChecksumError with the file's path in front: transformers
    reports a failed load by the parameter, and the file is what to replace."""
    try:
        yield
    except ChecksumError as e:
        raise ChecksumError(f"{path}: {e.what}", e.expected, e.actual) from None


class CheckedSlice:
    """``state_dict[name]`` for transformers: ``[...]`` reads the tensor."""

    __slots__ = ("_name", "_weights")

    def __init__(self, weights: Weights, name: str):
        self._weights = weights
        self._name = name

    def get_shape(self) -> list[int]:
        return list(self._weights.info(self._name).shape)

    def get_dtype(self) -> str:
        """safetensors' dtype string ("F32", "BF16", ...)."""
        spec = spec_for(self._weights.info(self._name).dtype)  # a stored tensor's dtype is always in the table
        return spec.safetensors or spec.name

    def __getitem__(self, index):
        tensor = self._weights.read(self._name)
        # A part (tensor-parallel sharding asks for rows) is cut from the checked whole:
        # a checksum covers whole chunks, so reading less could not be checked.
        return tensor if index is Ellipsis else tensor[index]

    def __repr__(self) -> str:
        return f"<CheckedSlice {self._name!r}>"


def weights_dtype(weights: Weights):
    """The torch dtype transformers' ``dtype="auto"`` takes from a checkpoint
    whose config names none: the first floating dtype among its tensors in
    name order, float8 and float4 skipped (a model cannot be built in them);
    else the first tensor's dtype; float32 for no tensors
    (``modeling_utils.get_state_dict_dtype``)."""
    import torch

    dtypes = [weights.torch_dtype(n) for n in weights.names()]
    for dt in dtypes:
        if dt.is_floating_point and "float8_" not in str(dt) and "float4_" not in str(dt):
            return dt
    return dtypes[0] if dtypes else torch.float32
