"""Which sink a target gets: :func:`open_sink`."""

from __future__ import annotations

from pathlib import Path

from lazystore.errors import InvalidInputError
from lazystore.sinks.local import LocalSink
from lazystore.sinks.remote import READ_ONLY_PROTOCOLS, S3_BLOCK_SIZE, UPLOAD_PROTOCOLS, RenameSink, UploadSink
from lazystore.sources import local_path


def open_sink(path, storage_options=None):
    """The sink for a local path or ``file://`` URL, or an object-store URL."""
    local = local_path(path)
    if local is not None:
        return LocalSink(Path(local))
    from lazystore.sources.fsspec import url_to_fs

    options = dict(storage_options or {})
    fs, inner = url_to_fs(path, options)
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & READ_ONLY_PROTOCOLS:
        raise InvalidInputError(
            f"cannot save to {path}: HTTP(S) URLs are read-only. Save to object storage "
            "(s3://, gs://, az://) or a local path, and serve that file over HTTP to read it from there")
    if protocols & UPLOAD_PROTOCOLS:
        block = S3_BLOCK_SIZE if protocols & {"s3", "s3a"} and "default_block_size" not in options else None
        return UploadSink(fs, inner, path, block)
    if "memory" in protocols:
        return RenameSink(fs, inner, path)
    raise InvalidInputError(
        f"cannot save to {path}: lazystore saves only where a checkpoint appears whole or not at all "
        f"(local paths, s3://, gs://, az://, memory://), and {'/'.join(sorted(protocols))} is not one of them")
