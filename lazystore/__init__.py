"""lazystore: ML checkpoints in one file, opened instantly and read lazily."""

from lazystore._config import show_config
from lazystore._core.chunking import DEFAULT_CHUNK_BYTES
from lazystore._core.distribution import VERSION as __version__
from lazystore._core.dtypes import DTYPES
from lazystore._native.layout import FORMAT_MAJOR, FORMAT_MINOR
from lazystore.api import load, open, save, save_async
from lazystore.codecs import ZstdPlanes
from lazystore.errors import (
    BaseCheckpointError,
    CheckpointNotFoundError,
    ChecksumError,
    ClosedError,
    DecryptionError,
    DigestError,
    EncryptionKeyError,
    FolderLockedError,
    FormatError,
    InvalidInputError,
    InvalidSelectionError,
    LazyStoreError,
    MissingDependencyError,
    RangeNotSupportedError,
    RemoteError,
    ShutdownError,
    SignatureError,
    StateDictMismatchError,
    TensorNotFoundError,
    UnsupportedDtypeError,
    UnsupportedVersionError,
    VerificationUnavailableError,
)

# Deprecated names (lazystore/errors.py): reading one warns, naming its replacement.
from lazystore.errors import __getattr__ as __getattr__
from lazystore.torch.handle import safe_open
from lazystore.training.manager import CheckpointManager
from lazystore.views.base import TensorInfo, ViewBase
from lazystore.views.checkpoint import CheckpointView, TensorSlice
from lazystore.writing.writer import Writer

FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"

__all__ = [
    "BaseCheckpointError",
    "CheckpointManager",
    "CheckpointNotFoundError",
    "CheckpointView",
    "ChecksumError",
    "ClosedError",
    "DEFAULT_CHUNK_BYTES",
    "DTYPES",
    "DecryptionError",
    "DigestError",
    "EncryptionKeyError",
    "FORMAT_VERSION",
    "FolderLockedError",
    "FormatError",
    "InvalidSelectionError",
    "InvalidInputError",
    "LazyStoreError",
    "MissingDependencyError",
    "RangeNotSupportedError",
    "RemoteError",
    "ShutdownError",
    "SignatureError",
    "StateDictMismatchError",
    "TensorInfo",
    "TensorNotFoundError",
    "TensorSlice",
    "UnsupportedDtypeError",
    "UnsupportedVersionError",
    "VerificationUnavailableError",
    "ViewBase",
    "Writer",
    "ZstdPlanes",
    "__version__",
    "load",
    "open",
    "safe_open",
    "save",
    "save_async",
    "show_config",
]
