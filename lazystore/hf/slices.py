"""The state dict ``from_pretrained`` hands transformers: one lazy handle per
tensor, read when transformers asks for it, checked against its checksums.

transformers reads its own safetensors files the same way: it puts
``safe_open(...).get_slice(name)`` objects in the state dict and reads each
with ``[...]`` when it places the parameter (``core_model_loading.
_materialize_copy``), a few tensors at a time from its loader threads. So a
model built on the meta device never holds more than its weights. These
handles keep that contract (``get_shape()``, ``get_dtype()``, ``[index]``)
but read through ``safe_open.get_tensor``: the whole tensor, checked (a
damaged one raises ``ls.ChecksumError`` naming it) unless ``verify=False``,
zero-copy for raw tensors of a local file (a copy-on-write view of the
map), decoded once for compressed ones.
"""

from __future__ import annotations

from lazystore._core.dtypes import BY_SAFETENSORS, BY_TORCH_NAME


class CheckedSlice:
    """``state_dict[name]`` for transformers: ``[...]`` reads the tensor."""

    __slots__ = ("_handle", "_name", "_verify")

    def __init__(self, handle, name: str, verify: bool):
        self._handle = handle
        self._name = name
        self._verify = verify

    def get_shape(self) -> list[int]:
        return self._handle.get_slice(self._name).get_shape()

    def get_dtype(self) -> str:
        return self._handle.get_slice(self._name).get_dtype()

    def __getitem__(self, index):
        tensor = self._handle.get_tensor(self._name, verify=self._verify)
        # A part (tensor-parallel sharding asks for rows) is cut from the checked whole:
        # a checksum covers whole chunks, so reading less could not be checked.
        return tensor if index is Ellipsis else tensor[index]

    def __repr__(self) -> str:
        return f"<CheckedSlice {self._name!r}>"


def lazy_state_dict(handle, *, verify: bool = True) -> dict:
    """``{name: CheckedSlice}`` for every tensor of an open
    ``lazystore.torch.safe_open`` handle (aliases of tied tensors included:
    transformers ties them again)."""
    return {name: CheckedSlice(handle, name, verify) for name in handle.keys()}


def weights_dtype(handle):
    """The torch dtype transformers' ``dtype="auto"`` takes from a checkpoint
    whose config names none: the first floating dtype among its tensors in
    name order, float8 and float4 skipped (a model cannot be built in them);
    else the first tensor's dtype; float32 for no tensors
    (``modeling_utils.get_state_dict_dtype``)."""
    import torch

    dtypes = [getattr(torch, _spec(handle.get_slice(n).get_dtype()).name) for n in handle.keys()]
    for dt in dtypes:
        if dt.is_floating_point and "float8_" not in str(dt) and "float4_" not in str(dt):
            return dt
    return dtypes[0] if dtypes else torch.float32


def _spec(name: str):
    """The dtype row of what ``SafeSlice.get_dtype()`` gives: safetensors'
    name, or lazystore's for the dtypes safetensors lacks."""
    return BY_SAFETENSORS.get(name) or BY_TORCH_NAME[name]
