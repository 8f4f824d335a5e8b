"""Which format a checkpoint is in, decided in one place: :func:`open_view`.

Data flows the same way whatever the format: a source gives bytes, the
format's parser turns its header into a validated
:class:`~lazystore.index.Index`, and :class:`~lazystore.view.CheckpointView`
reads, checks and decodes chunks from that index alone. A format module
only parses and writes headers:

- lazystore files: :func:`lazystore.index.read_index`;
- safetensors files: :mod:`lazystore.formats.safetensors`;
- folders of shards (lazystore's ``lazystore.index.json`` or Hugging Face's
  ``model.safetensors.index.json``): :mod:`lazystore.sharded`, one view over
  the views of its shards.

The format is told by content, never by extension. Files that are not
checkpoints at all (torch ``.pt`` zips, ``.npz``) are converted by
:mod:`lazystore.convert`.
"""

from __future__ import annotations

from lazystore._native import layout as fmt
from lazystore.errors import FormatError
from lazystore._native.locate import read_index, read_tail
from lazystore.sources import local_path, open_source
from lazystore.views.checkpoint import CheckpointView
from lazystore.formats import safetensors


def sniff(source) -> tuple[str, object]:
    """``(format name, index reader)`` for a source, from its first bytes
    (and, remotely, the tail lazystore needs anyway, so that opening a
    lazystore URL still costs one read)."""
    tail_start, tail = read_tail(source)
    if tail_start == 0:
        head = bytes(tail[:16])
    elif bytes(tail[-len(fmt.MAGIC):]) == fmt.MAGIC:
        return "lazystore", lambda src: read_index(src, (tail_start, tail))
    else:
        head = bytes(source.read(0, 16))
    if head[: len(fmt.MAGIC)] == fmt.MAGIC:
        return "lazystore", lambda src: read_index(src, (tail_start, tail))
    if safetensors.looks_like(head):
        return "safetensors", safetensors.read_index
    raise FormatError(f"not a lazystore or safetensors file ({source.size} bytes, starting {head[:8]!r})")


def open_view(path, *, verify: bool = False, storage_options=None):
    """Open any checkpoint lazystore reads, as a lazy view: a lazystore or
    safetensors file (local: memory-mapped; any fsspec URL: range requests),
    or a local folder of shards."""
    try:
        source = open_source(path, storage_options)
    except IsADirectoryError:  # only local paths can be folders
        from lazystore.sharded import open_folder

        return open_folder(local_path(path), verify=verify)
    try:
        _, reader = sniff(source)
    except BaseException:
        source.close()
        raise
    return CheckpointView(source, verify=verify, index_reader=reader)


__all__ = ["open_view", "sniff"]
