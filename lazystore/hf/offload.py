"""accelerate's big-model inference with the "disk" part of a model read
straight from a lazystore file: no offload folder, no copy.

accelerate runs a module placed on "disk" through an ``AlignDevicesHook``:
before each forward the hook reads the module's weights from a Mapping of
names to tensors (its ``weights_map``), and after it puts them back on the
meta device, so they live only while the module runs. Usually that Mapping
reads ``.dat`` files that ``dispatch_model`` first copied into an offload
folder. :class:`FileWeights` is such a Mapping over the checkpoint itself,
and :func:`dispatch_from_file` hands it to accelerate's own
``dispatch_model`` as the ``state_dict`` its ``OffloadedWeightsLoader``
serves first, with an empty offload index, so nothing is copied.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from lazystore import api
from lazystore._core import ties, torch_arrays
from lazystore._core.distribution import install_hint
from lazystore.errors import (
    FormatError,
    InvalidInputError,
    MissingDependencyError,
    StateDictMismatchError,
    TensorNotFoundError,
)
from lazystore.hf.types import DeviceMap, PathLike
from lazystore.sources import local_path
from lazystore.views.base import TensorInfo

if TYPE_CHECKING:
    import torch

NEEDS_TORCH = "lazystore.hf.offload gives PyTorch tensors"


class FileWeights(Mapping):
    """A Mapping of a model's names to torch tensors read from a lazystore file at each access.

    The names are the model's parameter and buffer names; the tensors are
    on the CPU, read from a lazystore file or sharded folder. Nothing is
    read until a name is looked up, and nothing is kept: each
    ``weights[name]`` reads that tensor again, checked against its checksums
    unless ``verify=False`` (a damaged one raises ``ls.ChecksumError``
    naming it). ``in``, ``len`` and iteration read no tensor data.

    ``names`` maps a model's name to the file's name where they differ
    (``{"lm_head.weight": "transformer.wte.weight"}``); every other name of
    the file serves as itself, and so do the names the file records as
    another tensor's alias (tied weights saved by ``lazystore.torch``).

    Memory: a raw tensor of a local file is a view of a fresh private
    mapping of the file, unmapped when the tensor is dropped, so after a
    forward nothing of it stays counted in the process's memory. A
    compressed tensor is decoded from chunks read with ``pread``: decoding
    through the view's shared mapping would leave every page it read
    resident for as long as the file is open (the whole file, after one
    forward over a model).

    The file stays open while the object lives (a dispatched model holds it
    through its hooks); ``close()`` or a ``with`` block closes it.

    Parameters
    ----------
    checkpoint : str or os.PathLike
        A lazystore file or sharded folder, local or a URL.
    names : Mapping of str to str, optional
        A model's names to the file's names, where they differ.
    verify : bool, optional
        Check each tensor against its checksums as it is read (the default).

    Raises
    ------
    FormatError
        ``checkpoint`` is not a checkpoint lazystore reads (the message names it).
    TensorNotFoundError
        ``names`` maps a name to one the file does not hold.
    InvalidInputError
        ``names`` is not a Mapping.
    MissingDependencyError
        PyTorch is not installed.
    """

    def __init__(self, checkpoint: PathLike, *, names: Mapping[str, str] | None = None, verify: bool = True) -> None:
        torch_arrays.require(NEEDS_TORCH)
        self._verify = verify
        self._mapped = open_named(checkpoint)
        self._unmapped = None
        try:
            stored = list(self._mapped)
            self._where = dict(zip(stored, stored))
            self._where.update(ties.read_aliases(self._mapped.system_metadata, stored))
            self._where.update(self._renamed(names))
            self._compressed = {n for n in stored if self._mapped.info(n).compression is not None}
            if self._compressed and _is_local(checkpoint):
                self._unmapped = open_named(checkpoint, mmap=False)
        except BaseException:
            self.close()
            raise
        # Tensors read so far: laziness made visible (one per lookup).
        self.reads = 0

    def _renamed(self, names) -> dict[str, str]:
        """``names`` as ``{model name: stored name}``, each file name checked to exist."""
        if names is None:
            return {}
        if not isinstance(names, Mapping):
            raise InvalidInputError(f"names must be a mapping of model names to names in {self.name}, "
                                    f"got {type(names).__name__}")
        out = {}
        for model_name, file_name in names.items():
            if file_name not in self._where:
                raise TensorNotFoundError(f"names maps {model_name!r} to {file_name!r}, which {self.name} "
                                          "does not hold")
            out[model_name] = self._where[file_name]
        return out

    @property
    def name(self) -> str:
        """The checkpoint read (its path or URL)."""
        return self._mapped.name

    def __getitem__(self, key: str):
        stored = self._stored(key)
        view = self._unmapped if self._unmapped is not None and stored in self._compressed else self._mapped
        array = view.load([stored], verify=self._verify)[stored]
        self.reads += 1
        return torch_arrays.cpu_tensor(array)

    def info(self, key: str) -> TensorInfo:
        """The file's :class:`~lazystore.TensorInfo` for ``key``, without reading its data.

        Parameters
        ----------
        key : str
            A model's name (or the file's).

        Returns
        -------
        TensorInfo
            The stored tensor's dtype, shape and sizes.

        Raises
        ------
        TensorNotFoundError
            The name is not served.
        """
        return self._mapped.info(self._stored(key))

    def __contains__(self, key) -> bool:
        # Mapping's default would read the tensor to answer.
        try:
            return key in self._where
        except TypeError:
            return False

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def close(self) -> None:
        """Close the file; tensors already handed out stay valid."""
        self._mapped.close()
        if self._unmapped is not None:
            self._unmapped.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<FileWeights {self.name!r}: {len(self._where)} names>"

    def _stored(self, key) -> str:
        try:
            return self._where[key]
        except (KeyError, TypeError):
            raise TensorNotFoundError(f"no tensor named {key!r} in {self.name}") from None


def open_named(checkpoint, **options):
    """``ls.open(checkpoint)``, its FormatError naming the checkpoint where
    the reader's message does not (a file cut short says only "bad magic
    at end of file")."""
    try:
        return api.open(checkpoint, **options)
    except FormatError as exc:
        name = os.fspath(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else None
        if name is None or name in str(exc):
            raise
        raise type(exc)(f"{name}: {exc}") from exc


def _is_local(checkpoint) -> bool:
    """A local path (a second, unmapped view of it is one more descriptor,
    where for a URL it would be more requests for nothing: remote reads are
    never mapped)."""
    return isinstance(checkpoint, (str, os.PathLike)) and local_path(checkpoint) is not None


class _Served(Mapping):
    """What the hooks of offloaded modules read: tensors the model still
    holds in memory (modules on "cpu" offloaded to a GPU) first, then the
    file, with tied names the file lacks served by their twin's name."""

    def __init__(self, in_memory: Mapping, weights: Mapping, twins: Mapping[str, str]):
        self._in_memory = in_memory
        self._weights = weights
        self._twins = twins

    def __getitem__(self, key):
        if key in self._in_memory:
            return self._in_memory[key]
        return self._weights[self._twins.get(key, key)]

    def __contains__(self, key) -> bool:
        return key in self._in_memory or self._twins.get(key, key) in self._weights

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*self._in_memory, *self._weights, *self._twins]))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def dispatch_from_file(model: torch.nn.Module, device_map: DeviceMap, weights: Mapping[str, torch.Tensor] | PathLike, *,
                       main_device: int | str | torch.device | None = None, offload_buffers: bool = False,
                       skip_keys: str | list[str] | None = None, preload_module_classes: list[str] | None = None,
                       force_hooks: bool = False) -> torch.nn.Module:
    """accelerate's ``dispatch_model``, with disk modules reading their weights from ``weights``.

    The modules on ``"disk"`` read their weights from ``weights`` at each
    forward: no offload folder, nothing copied. The model's disk modules may sit on the meta device (built under
    ``accelerate.init_empty_weights()``); their parameters (and persistent
    buffers with ``offload_buffers=True``) must be in ``weights`` with the
    model's shapes, else StateDictMismatchError naming the file, before
    anything is dispatched. Tensors the hooks do not read (those of
    modules on "cpu" or a GPU, and disk modules' buffers without
    ``offload_buffers``) that are still on the meta device are read from
    the file once, here, onto their device: a model built empty needs
    nothing else. The dtype of what is read at each forward is the model's:
    a tensor read in another dtype is cast (accelerate's hook does that), so
    ``model.to(dtype)`` on the meta model, or ``load_checkpoint_in_model``'s
    ``dtype=``, picks it. Tied weights the file stores under one name only
    are served under every name of the tie.

    Parameters
    ----------
    model : torch.nn.Module
        The model to dispatch; its disk modules may be on the meta device.
    device_map : dict of str to int or str or torch.device
        Module names to devices (``"disk"`` included), as accelerate takes it.
    weights : Mapping of str to torch.Tensor or str or os.PathLike
        The weights of the disk modules: a :class:`FileWeights` (or another
        Mapping of names to tensors), or a checkpoint path to open as one.
    main_device : int or str or torch.device, optional
        Where offloaded modules run; by default the first device of
        ``device_map`` that is neither "cpu" nor "disk", else "cpu".
    offload_buffers : bool, optional
        Persistent buffers of disk modules are read at each forward too.
    skip_keys : str or list of str, optional
        accelerate's ``dispatch_model``'s.
    preload_module_classes : list of str, optional
        accelerate's ``dispatch_model``'s.
    force_hooks : bool, optional
        accelerate's ``dispatch_model``'s.

    Returns
    -------
    torch.nn.Module
        The model, as ``dispatch_model`` returns it.

    Raises
    ------
    StateDictMismatchError
        ``weights`` lacks a tensor of a disk module, or holds it in another
        shape; found before anything is dispatched.
    InvalidInputError
        A tensor that no entry of ``device_map`` covers.
    MissingDependencyError
        accelerate is not installed.
    """
    accelerate_utils = require_accelerate()
    import accelerate

    if not isinstance(weights, Mapping):
        weights = FileWeights(weights)
    accelerate_utils.check_device_map(model, device_map)
    devices = set(device_map.values())
    if main_device is None:  # as dispatch_model picks it: we need to know it first
        on_devices = devices - {"cpu", "disk"}
        main_device = next(iter(on_devices)) if on_devices else "cpu"
    offloaded = ("disk",) if main_device in ("cpu", "mps") else ("cpu", "disk")
    disk = [m for m, d in device_map.items() if d == "disk"]
    twins = _twins(model, weights)
    _check_served(model, disk, weights, twins, offload_buffers)
    _materialize(model, device_map, weights, twins, offload_buffers)
    in_cpu = [m for m, d in device_map.items() if d == "cpu" and "cpu" in offloaded]
    in_memory = {n: t for n, t in model.state_dict().items() if _inside(n, in_cpu)} if in_cpu else {}
    return accelerate.dispatch_model(
        model, device_map, main_device=main_device, state_dict=_Served(in_memory, weights, twins),
        offload_index={}, offload_buffers=offload_buffers, skip_keys=skip_keys,
        preload_module_classes=preload_module_classes, force_hooks=force_hooks)


def require_accelerate():
    try:
        import accelerate.utils
    except ImportError as exc:
        hint = install_hint("hf", "accelerate")
        raise MissingDependencyError(f"dispatching a model needs accelerate: {hint}") from exc
    return accelerate.utils


def _inside(name: str, modules: list[str]) -> bool:
    """Is ``name`` a tensor of one of ``modules`` ("" is the whole model)?"""
    return any(m == "" or name == m or name.startswith(m + ".") for m in modules)


def _twins(model, weights: Mapping) -> dict[str, str]:
    """``{name: twin}`` for tied names ``weights`` lacks, each served by a
    name of its tie that ``weights`` holds (transformers' safetensors files
    store a tie once, e.g. ``lm_head.weight`` as ``transformer.wte.weight``)."""
    out: dict[str, str] = {}
    for group in ties.model_ties(model):
        held = [n for n in group if n in weights]
        if held:
            out.update((n, held[0]) for n in group if n not in weights)
    return out


def _disk_tensors(model, disk: list[str], *, buffers: bool) -> dict:
    """The parameters (or the persistent buffers) of the modules on disk, by name."""
    if buffers:
        persistent = set(model.state_dict(keep_vars=True))
        named = ((n, t) for n, t in model.named_buffers(remove_duplicate=False) if n in persistent)
    else:
        named = model.named_parameters(remove_duplicate=False)
    return {n: t for n, t in named if _inside(n, disk)}


def _materialize(model, device_map, weights, twins, offload_buffers: bool) -> None:
    """Tensors still on the meta device that no hook reads at each forward
    (those of modules kept in memory, and the buffers of disk modules
    without ``offload_buffers``), read from the file once, here, onto their
    module's device ("cpu" for "cpu" and "disk" modules: a hook moves them on).
    A tie is read once and tied again afterwards."""
    from accelerate.utils import set_module_tensor_to_device

    groups = ties.model_ties(model)
    later_in_a_tie = {n for group in groups for n in group[1:]}
    persistent = set(model.state_dict(keep_vars=True))
    named = [(n, t, True) for n, t in model.named_parameters(remove_duplicate=False)]
    named += [(n, t, False) for n, t in model.named_buffers(remove_duplicate=False)]
    for name, t, is_parameter in named:
        if t.device.type != "meta" or name in later_in_a_tie:
            continue
        device = device_map[module_of(name, device_map)]
        if device == "disk" and (is_parameter or (offload_buffers and name in persistent)):
            continue  # read by its hook at each forward
        source = twins.get(name, name)
        if source in weights:
            set_module_tensor_to_device(model, name, "cpu" if device in ("cpu", "disk") else device,
                                        value=weights[source])
    ties.retie(model, groups)


def module_of(name: str, device_map, where: str = "the model") -> str:
    """The ``device_map`` entry a tensor ``name`` falls under (its longest
    listed prefix; "" is the whole model)."""
    module = name
    while module and module not in device_map:
        module = module.rpartition(".")[0]
    if module == "" and "" not in device_map:
        raise InvalidInputError(f"{name} (from {where}) doesn't have any device set in device_map")
    return module


def _check_served(model, disk, weights, twins, offload_buffers: bool) -> None:
    """Every tensor a disk module's hook will read is in ``weights``, with
    the model's shape: found now, not at the first forward, deep in a hook."""
    wanted = _disk_tensors(model, disk, buffers=False)
    if offload_buffers:
        wanted.update(_disk_tensors(model, disk, buffers=True))
    where = getattr(weights, "name", "the weights")
    missing = [n for n in wanted if twins.get(n, n) not in weights]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise StateDictMismatchError(f"{where} lacks {len(missing)} tensor(s) of the modules on disk: {shown}")
    info = getattr(weights, "info", None)
    if info is None:
        return
    for n, t in wanted.items():
        shape = tuple(info(twins.get(n, n)).shape)
        if shape != tuple(t.shape):
            raise StateDictMismatchError(f"{where}: {n!r} has shape {list(shape)} in the file, the model's "
                                         f"is {list(t.shape)}")
