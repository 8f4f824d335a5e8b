"""PyTorch tensors <-> numpy arrays. The only module of lazystore that imports torch.

torch is imported lazily: :func:`is_tensor` and :func:`describe` only look
at ``sys.modules`` (an object can only be a torch tensor if torch is already
imported), and :func:`require` imports it when a torch tensor must be made,
raising :class:`~lazystore.MissingDependencyError` if it is not installed.

Conversions never copy on the CPU: ``to_numpy`` and ``from_numpy`` share
memory, reinterpreting the bits of dtypes numpy lacks natively (bfloat16,
float8) through a same-sized integer view, e.g. ``t.view(torch.int16)``.
"""

from __future__ import annotations

import sys

import numpy as np

from lazystore._core.distribution import install_hint
from lazystore._core.dtypes import BY_TORCH_NAME, lookup, spec_for
from lazystore.errors import FormatError, InvalidInputError, MissingDependencyError, UnsupportedDtypeError

EXTRA = install_hint("torch", "torch")


def is_tensor(x) -> bool:
    """Is ``x`` a torch tensor? Never imports torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def require(why: str = "this checkpoint holds PyTorch tensors"):
    """The torch module, or a MissingDependencyError saying ``why`` it is
    needed and naming the extra."""
    try:
        import torch
    except ImportError as exc:
        raise MissingDependencyError(f"{why}, and PyTorch is not installed: {EXTRA}") from exc
    return torch


def torch_name(dtype) -> str:
    """The name of a torch dtype without its module: "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def torch_dtype_of(np_dtype):
    """The torch dtype holding a numpy dtype's values, or None if torch has none."""
    spec = lookup(np_dtype)
    return getattr(require(), spec.name) if spec is not None else None


def describe(t, where: str = "") -> dict:
    """Check that a tensor can be saved; the attributes to record for it."""
    torch = sys.modules["torch"]
    at = f" at {where}" if where else ""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise InvalidInputError(
            f"cannot save a {type(t).__qualname__}{at}: only plain tensors and nn.Parameter "
            "(convert with t.as_subclass(torch.Tensor))")
    if t.layout is not torch.strided or t.is_nested:
        raise InvalidInputError(f"cannot save a {t.layout} tensor{at}: only dense (strided) tensors "
                                "(convert with t.to_dense())")
    if torch_name(t.dtype) not in BY_TORCH_NAME:
        supported = ", ".join(BY_TORCH_NAME)
        raise UnsupportedDtypeError(f"torch dtype {t.dtype}{at} cannot be stored; supported: {supported}")
    if t.device.type == "meta":
        raise InvalidInputError(f"cannot save a tensor on the meta device{at}: it has no data")
    attrs = {}
    if type(t) is torch.nn.Parameter:
        attrs["parameter"] = True
    if t.requires_grad:
        attrs["requires_grad"] = True
    return attrs


def is_plain(t) -> bool:
    """A torch tensor for which :func:`describe` records no attribute (not
    an nn.Parameter, not requiring grad). Never imports torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(t, torch.Tensor) and type(t) is not torch.nn.Parameter \
        and not t.requires_grad


def to_numpy(t) -> np.ndarray:
    """A numpy array of a tensor's values, moved to the CPU first. Shares
    memory with a CPU tensor; never copies unless the tensor is elsewhere or
    has its conjugate/negative bit set."""
    torch = sys.modules["torch"]
    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    t = t.resolve_conj().resolve_neg()
    spec = BY_TORCH_NAME[torch_name(t.dtype)]
    if spec.torch_via is None:
        return t.numpy()
    return t.view(getattr(torch, spec.torch_via)).numpy().view(spec.dtype)


def device(map_location, what: str = "map_location"):
    """``map_location`` as a torch.device (None stays None: the CPU), checked
    to exist here: asking for a GPU on a machine without one fails now, with
    a clear error, rather than in the middle of a load. An int is a CUDA
    index, as torch and safetensors take it. ``what`` names the argument in
    messages."""
    torch = require()
    if map_location is None:
        return None
    if isinstance(map_location, torch.device):
        dev = map_location
    elif isinstance(map_location, (str, int)) and not isinstance(map_location, bool):
        try:
            # An int is a CUDA index as safetensors takes it (torch.device(0)
            # means whichever accelerator there is, and fails without one).
            dev = torch.device("cuda", map_location) if isinstance(map_location, int) else torch.device(map_location)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"bad {what} {map_location!r}: {exc}") from None
    else:
        raise InvalidInputError(
            f"{what} must be None, a device string such as 'cpu' or 'cuda:0', an int (a CUDA index) or a "
            f"torch.device; got {map_location!r}")
    _check_available(torch, dev, what)
    return dev


def _check_available(torch, dev, what: str) -> None:
    """Refuse a device this process cannot use: an accelerator whose torch
    backend (torch.cuda, torch.mps, torch.xpu, ...) says it is unavailable,
    or an index past its device count. cpu and meta always exist."""
    if dev.type in ("cpu", "meta"):
        return
    backend = getattr(torch, dev.type, None)
    is_available = getattr(backend, "is_available", None)
    if callable(is_available) and not is_available():
        raise InvalidInputError(f"{what} {str(dev)!r}: no {dev.type} device is available here "
                                f"(torch.{dev.type}.is_available() is False)")
    count = getattr(backend, "device_count", None)
    if dev.index is not None and callable(count) and dev.index >= count():
        raise InvalidInputError(f"{what} {str(dev)!r}: there is no such device here "
                                f"(torch.{dev.type}.device_count() is {count()})")


def is_cpu(map_location) -> bool:
    """Does ``map_location`` name the CPU? Never imports torch (a
    torch.device can only exist if torch is imported already)."""
    if isinstance(map_location, str):
        return map_location.partition(":")[0].strip() == "cpu"
    return getattr(map_location, "type", None) == "cpu"


def check_nothing_to_place(map_location) -> None:
    """``ls.load`` of tensors that are all numpy arrays: they live on the
    CPU, so a ``map_location`` other than None or the CPU cannot be honoured,
    and is refused rather than ignored."""
    if map_location is None or is_cpu(map_location):
        return
    raise InvalidInputError(
        f"map_location={map_location!r} places torch tensors, and what is loaded holds none: a flat "
        "checkpoint (or state saved from numpy) reads back as numpy arrays, on the CPU. For torch "
        "tensors on a device use lazystore.torch.load_file(path, device=...)")


def cpu_tensor(arr: np.ndarray):
    """The CPU torch tensor sharing ``arr``'s memory (dtypes numpy lacks
    natively are reinterpreted through a same-sized integer view)."""
    torch = require()
    spec = spec_for(arr.dtype)  # arrays read from a checkpoint: a dtype the format stores
    if spec.torch_via is None:
        return torch.from_numpy(arr)
    return torch.from_numpy(arr.view(np.dtype(spec.torch_via))).view(getattr(torch, spec.name))


def with_attributes(t, node: dict):
    """``t`` given back the attributes :func:`describe` recorded in ``node``
    (an nn.Parameter, requires_grad)."""
    torch = require()
    requires_grad = node.get("requires_grad", False)
    if requires_grad and not (t.is_floating_point() or t.is_complex()):
        raise FormatError(f"corrupt tree: tensor {node.get('key')!r} of dtype {t.dtype} cannot require grad")
    if node.get("parameter", False):
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(arr: np.ndarray, node: dict, dev=None):
    """The torch tensor for one loaded array, sharing its memory on the CPU,
    moved to ``dev`` and given back the attributes :func:`describe` recorded.
    (Many tensors for a GPU go faster through :class:`~lazystore._core.staging.Placement`.)"""
    return with_attributes(on_device(arr, dev), node)


def on_device(arr: np.ndarray, dev=None):
    """``arr`` as a torch tensor on ``dev`` (None: the CPU, sharing its memory),
    moved with ``Tensor.to``."""
    t = cpu_tensor(arr)
    if dev is not None and dev.type != "cpu":
        t = t.to(dev)
    return t
