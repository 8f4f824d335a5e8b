"""The whole exception hierarchy of lazystore.

Every error raised for bad input derives from :class:`LazyStoreError`, and
also from the built-in exception a caller would naturally catch, so both
``except ls.FormatError`` and ``except ValueError`` work (and a missing
tensor is both a ``LazyStoreError`` and a ``KeyError``).
"""

from __future__ import annotations

import warnings


class LazyStoreError(Exception):
    """Base class of every error lazystore raises for bad input."""


class FormatError(LazyStoreError, ValueError):
    """The bytes are not a valid checkpoint.

    Wrong magic, truncated, corrupt index, inconsistent fields, or malformed
    compressed data.
    """


class UnsupportedVersionError(FormatError):
    """The file was written in a format version this lazystore cannot read."""


class ChecksumError(FormatError):
    """Stored bytes do not match the checksum recorded for them.

    Parameters
    ----------
    what : str
        What failed (a tensor and chunk); without ``expected``, the whole
        message.
    expected : int or None, optional
        The xxh3-64 checksum the index records.
    actual : int or None, optional
        The checksum of the bytes read.
    """

    def __init__(self, what: str, expected: int | None = None, actual: int | None = None) -> None:
        # Without digests (``verify()`` names a damaged tensor, not its
        # digests), ``what`` is the whole message.
        super().__init__(what if expected is None else
                         f"checksum mismatch in {what}: stored xxh3-64 {expected:016x}, computed {actual:016x}")
        self.what = what
        self.expected = expected
        self.actual = actual


class BaseCheckpointError(FormatError):
    """The base of a delta checkpoint is missing, unreadable or not the one coded against.

    For a format 1.3 delta, a base whose content changed; for a 1.2 one, any
    other file than the one it was coded against (replaced or rewritten
    since). The message names the base file.
    """


class VerificationUnavailableError(LazyStoreError):
    """``verify()`` of a file that records no checksums.

    A safetensors file lazystore did not write, say: nothing says what its
    bytes should be.
    """


class TensorNotFoundError(LazyStoreError, KeyError):
    """A tensor name that is not in the checkpoint."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class InvalidInputError(LazyStoreError, ValueError):
    """An argument lazystore cannot accept.

    A bad key, a duplicate key, an unknown codec, metadata that is not JSON,
    and so on.
    """


class StateDictMismatchError(InvalidInputError, RuntimeError):
    """A strict ``load_model`` of a file whose tensor names do not match the model's.

    Raised by ``lazystore.torch.load_model(..., strict=True)``: a
    RuntimeError, as torch's and safetensors' own, with torch's wording.
    """


class UnsupportedDtypeError(InvalidInputError, TypeError):
    """An array whose dtype the format cannot store."""


class ClosedError(LazyStoreError, ValueError):
    """An operation on a checkpoint or writer that has been closed."""


class MissingDependencyError(LazyStoreError, ImportError):
    """An optional dependency is needed; the message names the extra."""


class RemoteError(LazyStoreError, OSError):
    """Remote storage failed to deliver bytes.

    A request that errored, broke off, timed out or returned fewer bytes
    than asked, on every attempt (transient failures are retried, with
    backoff; see docs/remote.md), or an object that changed since it was
    opened. Its bytes are never used as data; the errno of the cause is
    kept.
    """


class InvalidSelectionError(LazyStoreError, IndexError):
    """A selection that is out of range or not basic indexing.

    What is passed to ``get_slice(name)[...]`` may be ints, slices, Ellipsis
    and None. ("Index" in lazystore means a file's table of contents, hence
    the name.)
    """


class CheckpointNotFoundError(LazyStoreError, KeyError):
    """A CheckpointManager step that is not among the retained checkpoints.

    Also raised by a manager that has none yet.
    """

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class RangeNotSupportedError(RemoteError):
    """The server answered a range request with the whole object.

    It ignores HTTP ``Range`` (``python -m http.server`` does), and
    lazystore reads checkpoints by byte ranges. Raised at the first such
    answer, whose transfer is stopped; never retried. docs/remote.md lists
    servers that work.
    """


class FolderLockedError(LazyStoreError, BlockingIOError):
    """A CheckpointManager's save into a folder another manager is saving into.

    The other manager holds the folder's lock file: one saver per folder.
    Raised at once, never waited for.
    """


class ShutdownError(LazyStoreError, RuntimeError):
    """A background save asked for while the interpreter shuts down.

    From an ``atexit`` handler, say, when no thread can be started to run
    it: call ``save`` (not ``save_async``) there, or close the manager before exit.
    """



class EncryptionKeyError(LazyStoreError):
    """A missing, wrong or needless encryption key.

    An encrypted checkpoint read without its key (names the tensor), a key
    that does not open the file (its key-check value differs), or a key
    given for a file that is not encrypted.
    """


class DecryptionError(ChecksumError):
    """An encrypted chunk or index that fails its authentication.

    A sealed (encrypted) chunk whose authentication tag fails (names the
    tensor and chunk: it was modified, moved or swapped), or an encrypted
    file whose index fails its MAC (says "index"). Never garbage: no byte of
    a chunk that fails is handed out.
    """

# Old names, kept so code written against them (``except ls.InvalidIndexError``)
# still runs, each the very class it was renamed to; reading one warns, naming
# the new name (PEP 562, as zarr and httpx deprecate names). lazystore itself
# never uses them: the test suite turns these warnings into errors.
_DEPRECATED_NAMES = {"InvalidIndexError": "InvalidSelectionError"}


def __getattr__(name: str) -> type:
    """A deprecated name's class, with a DeprecationWarning naming its replacement.

    ``lazystore/__init__.py`` re-exports this lookup, so
    ``ls.InvalidIndexError`` warns too.
    """
    new = _DEPRECATED_NAMES.get(name)
    if new is None:
        raise AttributeError(f"module 'lazystore' has no attribute {name!r}")
    warnings.warn(f"lazystore.{name} is deprecated: it is another name of lazystore.{new} (the same class); "
                  f"use {new}", DeprecationWarning, stacklevel=2)
    return globals()[new]


class DigestError(ChecksumError):
    """A chunk's bytes do not match the cryptographic digest recorded for them.

    The stored bytes (or, for a delta chunk, its base's decoded bytes) and
    the digest (BLAKE3 or SHA-256, format 1.4): damaged, or tampered with.
    The message names the tensor and the chunk.

    Parameters
    ----------
    what : str
        What failed (the tensor and chunk); without both digests, the whole
        message.
    expected : bytes or None, optional
        The digest the index records.
    actual : bytes or None, optional
        The digest of the bytes read.
    algorithm : str, optional
        The digest's algorithm, for the message.
    """

    def __init__(self, what: str, expected: bytes | None = None, actual: bytes | None = None,
                 algorithm: str = "digest") -> None:
        super().__init__(what)
        if expected is not None and actual is not None:
            self.args = (f"{algorithm} digest mismatch in {what}: stored {expected.hex()}, computed {actual.hex()}",)
        self.algorithm = algorithm
        self.expected_digest = expected
        self.actual_digest = actual


class SignatureError(LazyStoreError):
    """A signature that does not vouch for the checkpoint.

    Its ``.sig`` is missing, unreadable or forged, made with another key, or
    made for another file or index (an index edited after signing), or a
    pinned ``index_sha256`` that the index does not have. Nothing is read
    from such a checkpoint.
    """


__all__ = ["BaseCheckpointError", "CheckpointNotFoundError", "ChecksumError", "ClosedError", "DecryptionError",
           "DigestError", "EncryptionKeyError", "FolderLockedError", "FormatError", "InvalidInputError",
           "InvalidSelectionError", "LazyStoreError", "MissingDependencyError", "RangeNotSupportedError", "RemoteError",
           "ShutdownError", "SignatureError", "StateDictMismatchError", "TensorNotFoundError", "UnsupportedDtypeError",
           "UnsupportedVersionError", "VerificationUnavailableError"]
