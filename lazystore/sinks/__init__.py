"""Where a Writer's bytes go, and how they appear at the target all at once.

A sink takes the checkpoint's bytes in order (``write``), then either
publishes them whole at the target (``commit``) or throws them away
(``abort``, also run if the sink is dropped unfinished). Either way, a
reader of the target sees the previous checkpoint or the new one, never a
mix or a part:

- :class:`~lazystore.sinks.local.LocalSink`: a locked partial file beside
  the target (see :mod:`lazystore.sinks.partials`), fsync'd, renamed over
  the target, and the folder fsync'd. A symlink's target is replaced and the
  link kept; a folder, device, FIFO or socket is refused
  (:mod:`lazystore.sinks.targets`). :func:`remove_stale_partials` removes
  what killed writers left in a folder (every local save runs it first).
- :class:`~lazystore.sinks.remote.UploadSink`: an object store's upload (s3://, gs://, az://). The
  object appears only when the upload completes on close (for S3, a
  multipart upload); abort cancels it. Bytes are handed over one block at
  a time, so memory stays bounded whatever the tensor sizes.
- :class:`~lazystore.sinks.remote.RenameSink`: memory:// (for tests): a hidden temporary object
  moved over the target when complete.

HTTP(S) is read-only, and other fsspec filesystems offer no such guarantee:
:func:`~lazystore.sinks.dispatch.open_sink` refuses both. Writers end
with :class:`~lazystore.sinks.base.CloseOrAbort`'s ``with`` behaviour.
"""

from lazystore.sinks.base import CloseOrAbort
from lazystore.sinks.dispatch import open_sink
from lazystore.sinks.local import LocalSink, fsync_dir
from lazystore.sinks.partials import remove_stale as remove_stale_partials
from lazystore.sinks.remote import RenameSink, UploadSink

__all__ = ["CloseOrAbort", "LocalSink", "RenameSink", "UploadSink", "fsync_dir", "open_sink",
           "remove_stale_partials"]
