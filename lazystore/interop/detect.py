"""Which format a checkpoint file is in, decided in one place: :func:`sniff`.

Data flows the same way whatever the format: a source gives bytes, the
format's parser turns its header into a validated
:class:`~lazystore._native.index.Index`, and :class:`~lazystore.views.checkpoint.CheckpointView`
reads, checks and decodes chunks from that index alone. A format module
only parses and writes headers:

- lazystore files: :func:`lazystore._native.locate.read_index`;
- safetensors files: :mod:`lazystore.interop.safetensors`.

The format is told by content, never by extension. Folders of shards are
opened by :mod:`lazystore.interop.sharded`, each shard with
:func:`open_file`; :func:`lazystore.open` tells folders from files. Files
that are not checkpoints at all (torch ``.pt`` zips, ``.npz``) are read
for conversion by :mod:`lazystore.interop.archives`.
"""

from __future__ import annotations

from lazystore._native import layout as fmt
from lazystore._native.locate import read_index, read_tail
from lazystore.errors import FormatError
from lazystore.interop import safetensors
from lazystore.sources import open_source
from lazystore.views.checkpoint import CheckpointView


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
    # The message never quotes the bytes: the file may be anything (a key, a
    # password file given by mistake), and the error may reach a log.
    raise FormatError(f"{source.name}: not a lazystore or safetensors file ({source.size} bytes, unknown magic)")


def open_file(path, *, verify: bool = False, storage_options=None, mmap: bool = True) -> CheckpointView:
    """Open a lazystore or safetensors file as a lazy view (local: memory-mapped
    unless ``mmap=False``; any fsspec URL: range requests). A local folder
    raises IsADirectoryError, told from the open file descriptor without a
    second lookup of the path."""
    return open_view(open_source(path, storage_options, mmap=mmap), verify=verify)


def open_view(source, *, verify: bool = False) -> CheckpointView:
    """The view of an open source, in the format its content says; the
    view owns the source (closed here if it is no checkpoint)."""
    try:
        _, reader = sniff(source)
    except BaseException:
        source.close()
        raise
    return CheckpointView(source, verify=verify, index_reader=reader)


__all__ = ["open_file", "open_view", "sniff"]
