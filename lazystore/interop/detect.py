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

from functools import partial

from lazystore._core.naming import naming
from lazystore._native import layout as fmt
from lazystore._native.locate import read_index, read_tail
from lazystore.errors import FormatError
from lazystore.interop import safetensors
from lazystore.sources import open_source
from lazystore.views.checkpoint import CheckpointView, IndexReader


def sniff(source) -> tuple[str, IndexReader]:
    """``(format name, index reader)`` for a source, from its first bytes
    (and, remotely, the tail lazystore needs anyway, so that opening a
    lazystore URL still costs one read)."""
    tail_start, tail = read_tail(source)
    if tail_start == 0:
        head = bytes(tail[:16])
    elif bytes(tail[-len(fmt.MAGIC):]) == fmt.MAGIC:
        return "lazystore", partial(read_index, known_tail=(tail_start, tail))
    else:
        head = bytes(source.read(0, 16))
    if head[: len(fmt.MAGIC)] == fmt.MAGIC:
        return "lazystore", partial(read_index, known_tail=(tail_start, tail))
    if safetensors.looks_like(head):
        return "safetensors", safetensors.read_index
    # The message never quotes the bytes: the file may be anything (a key, a
    # password file given by mistake), and the error may reach a log.
    raise FormatError(f"{source.name}: not a lazystore or safetensors file ({source.size} bytes, "
                      f"{_what_else(source, head)})")


# A zip's first local file header: its signature, and at byte 26 the
# lengths of the first member's name and extra field; the name follows at 30.
_ZIP_MAGIC = b"PK\x03\x04"
_ZIP_NAME_AT = 30
_PICKLE_PROTOCOLS = b"\x02\x03\x04\x05"


def _what_else(source, head: bytes) -> str:
    """What a file that is no checkpoint looks like, with what to do about
    it: torch files and ``.npz`` archives are read for conversion only (so
    nothing is unpickled by opening a file), and the user should learn so
    here rather than from the command line's help."""
    if head[:1] == b"\x80" and head[1:2] and head[1] in _PICKLE_PROTOCOLS:
        return ("a pickle: torch.save's legacy format, which lazystore does not read; load it with "
                "torch.load(path, weights_only=True) and save that with ls.save")
    if head[:4] != _ZIP_MAGIC:
        return "unknown magic"
    first = _first_zip_member(source)
    if first.endswith(".npy"):
        return (f"an .npz archive: convert it with `lazystore convert {source.name} out.lzy` or "
                "lazystore.interop.from_npz(path, 'out.lzy')")
    if first == "data.pkl" or first.endswith("/data.pkl"):
        return (f"a torch checkpoint (torch.save's zip): convert it with `lazystore convert {source.name} "
                "out.lzy` or lazystore.interop.from_torch(path, 'out.lzy'), which read it with "
                "torch.load(weights_only=True)")
    return "a zip archive; torch .pt/.bin files and .npz archives convert with `lazystore convert`"


def _first_zip_member(source) -> str:
    """The name of a zip's first member, from its first local header ("" if
    it cannot be read): torch.save writes ``<name>/data.pkl`` first, numpy's
    ``savez`` an ``.npy`` member."""
    if source.size < _ZIP_NAME_AT:
        return ""
    name_len = int.from_bytes(bytes(source.read(26, 28)), "little")
    end = min(source.size, _ZIP_NAME_AT + name_len)
    return bytes(source.read(_ZIP_NAME_AT, end)).decode("utf-8", "replace")


def open_file(path, *, verify: bool = False, storage_options=None, mmap: bool = True, anchor=None,
              encryption_key=None) -> CheckpointView:
    """Open a lazystore or safetensors file as a lazy view (local: memory-mapped
    unless ``mmap=False``; any fsspec URL: range requests). A local folder
    raises IsADirectoryError, told from the open file descriptor without a
    second lookup of the path. An error about the file's bytes names it (a
    file cut short says "<path>: not a lazystore file, or truncated ...")."""
    with naming(path):
        return open_view(open_source(path, storage_options, mmap=mmap), verify=verify, anchor=anchor,
                         encryption_key=encryption_key)


def open_view(source, *, verify: bool = False, anchor=None, encryption_key=None) -> CheckpointView:
    """The view of an open source, in the format its content says; the
    view owns the source (closed here if it is no checkpoint). An
    ``anchor`` (:mod:`lazystore.signing`: a signature or a pinned index
    digest) checks the index before it is parsed."""
    try:
        kind, reader = sniff(source)
        if anchor is not None:
            reader = anchor.reader(kind, reader, source.name)
    except BaseException:
        source.close()
        raise
    return CheckpointView(source, verify=verify, index_reader=reader, encryption_key=encryption_key)


__all__ = ["open_file", "open_view", "sniff"]
