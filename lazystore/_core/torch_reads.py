"""A flat checkpoint's tensors as torch tensors: what ``lazystore.torch.load_file``,
``safe_open`` and ``ls.load`` of a flat torch checkpoint return.

Names stored as another tensor's alias (:mod:`lazystore._core.ties`) come
back as that one tensor object, and tensors for a device go through
:class:`~lazystore._core.staging.Placement` a batch at a time.
"""

from __future__ import annotations

from lazystore._core import staging, ties
from lazystore._core.batching import batch_by_bytes

# Host memory a load to a device fills before handing it on (see tensors_of).
DEVICE_BATCH_BYTES = 256 << 20


def tensors_of(ck, keys, dev, *, verify: bool = True) -> dict:
    """The torch tensors ``keys`` selects from an open checkpoint, aliases
    resolved to one tensor object per stored tensor, checked unless
    ``verify`` is false (see ``ck.load``).

    For another device than the CPU, tensors are read a batch of about
    :data:`DEVICE_BATCH_BYTES` at a time, so decoded compressed tensors wait
    in host memory a batch at a time, not all at once."""
    names = list(ck)
    aliases = ties.read_aliases(ck.system_metadata, names)
    wanted = ties.wanted(names, aliases, keys)
    stored = list(dict.fromkeys(aliases.get(n, n) for n in wanted))
    on_host = dev is None or dev.type == "cpu"
    sizes = {n: ck.info(n).nbytes for n in stored} if not on_host else {}
    batches = [stored] if on_host else batch_by_bytes(stored, DEVICE_BATCH_BYTES, sizes.__getitem__)
    tensors = {}
    with staging.Placement(dev, sum(sizes.values()) or None) as place:
        for batch in batches:
            for n, a in ck.load(batch, verify=verify).items():
                tensors[n] = place.tensor(a)
    return {n: tensors[aliases.get(n, n)] for n in wanted}
