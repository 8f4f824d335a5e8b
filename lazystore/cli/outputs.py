"""Choosing and opening what ``convert`` and ``merge`` write.

The output format follows the destination (:func:`output_format`), and
:data:`OUTPUTS` maps each format to the writer that makes it: the one place
a new output format plugs in.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import lazystore as ls
from lazystore.cli.errors import CliError, about
from lazystore.interop import SafetensorsWriter, ShardedWriter, targets

# Output formats by destination: a folder, or by extension as ls.save
# decides (lazystore.interop.targets). To add one: name it in
# targets.EXTENSIONS and add its opener to OUTPUTS. An opener takes the
# destination and the options below and returns a context manager with
# Writer's interface: add(name, array, compression=...), committed on a
# clean exit and discarded on an exception. ``digest`` is the chunk digests'
# algorithm (None: none): a format that cannot hold them refuses one.


def output_format(dst) -> str:
    """The format a destination asks for: "folder", or what its extension says."""
    if os.path.isdir(dst) or os.fspath(dst).endswith(("/", os.sep)):
        return "folder"
    return targets.format_of(dst)


def _open_lazystore(dst, *, metadata, system_metadata, compression_level, max_shard_size, digest, encryption_key):
    if max_shard_size is not None:
        return _open_folder(dst, metadata=metadata, system_metadata=system_metadata,
                            compression_level=compression_level, max_shard_size=max_shard_size, digest=digest,
                            encryption_key=encryption_key)
    w = ls.Writer(dst, compression_level=compression_level, metadata=metadata, digest=digest,
                  encryption_key=encryption_key)
    w.system_metadata.update(system_metadata)
    return w


def _open_folder(dst, *, metadata, system_metadata, compression_level, max_shard_size, digest, encryption_key):
    w = ShardedWriter(dst, max_shard_size=max_shard_size, compression_level=compression_level, metadata=metadata,
                      digest=digest, encryption_key=encryption_key)
    w.system_metadata.update(system_metadata)
    return w


def _open_safetensors(dst, *, metadata, system_metadata, compression_level, max_shard_size, digest,
                      encryption_key):
    if encryption_key is not None:
        raise CliError("an encrypted output is a lazystore file: write a .lzy name, or add --decrypt to write "
                       "plaintext safetensors")
    if max_shard_size is not None:
        raise CliError("--max-shard-size writes a lazystore sharded folder; sharded safetensors output "
                       "is not supported")
    if digest is not None:
        raise CliError("--digest writes chunk digests, which only a lazystore file holds; a safetensors "
                       "file has none")
    w = SafetensorsWriter(dst, metadata=metadata)
    w.system_metadata.update(system_metadata)
    return w


OUTPUTS: dict[str, Callable] = {"lazystore": _open_lazystore, "folder": _open_folder,
                                "safetensors": _open_safetensors}


def open_output(dst, *, metadata: Mapping, system_metadata: Mapping,
                compression_level: int | None = None, max_shard_size: int | None = None,
                digest: str | None = None, encryption_key: bytes | None = None):
    """A writer for ``dst`` in the format it asks for (see :func:`output_format`),
    encrypted with ``encryption_key`` when one is given."""
    fmt = output_format(dst)
    opener = OUTPUTS.get(fmt)
    if opener is None:
        raise CliError(f"{dst}: writing {fmt} output is not supported yet; write a lazystore file (.lzy)")
    with about(dst):
        writer = opener(dst, metadata=metadata, system_metadata=system_metadata,
                        compression_level=compression_level, max_shard_size=max_shard_size, digest=digest,
                        encryption_key=encryption_key)
    return _Committing(writer, dst)


class _Committing:
    """A writer whose commit (or discard) at the end of the ``with`` block
    names ``dst`` in its errors, as its opening does: the last buffered
    write, the fsync and the rename happen there, and an OSError from
    ``os.write`` carries no file name at all."""

    def __init__(self, writer, dst):
        self._writer = writer
        self._dst = dst

    def __enter__(self):
        return self._writer.__enter__()

    def __exit__(self, *exc_info):
        with about(self._dst):
            return self._writer.__exit__(*exc_info)
