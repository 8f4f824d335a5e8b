"""lazystore: ML checkpoints in one file, opened instantly and read lazily."""

from .api import load, open, save
from .chunking import DEFAULT_CHUNK_BYTES
from .codecs import ZstdPlanes
from .dtypes import DTYPES
from .errors import (
    CheckpointNotFoundError,
    ChecksumError,
    ClosedError,
    FormatError,
    InvalidIndexError,
    InvalidInputError,
    LazyStoreError,
    MissingDependencyError,
    RemoteError,
    TensorNotFoundError,
    UnsupportedDtypeError,
    UnsupportedVersionError,
    VerificationUnavailableError,
)
from .format import FORMAT_MAJOR, FORMAT_MINOR
from .index import TensorInfo
from .manager import CheckpointManager
from .view import CheckpointView, TensorSlice
from .writer import Writer

__version__ = "0.1.0"
FORMAT_VERSION = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"

__all__ = [
    "CheckpointManager",
    "CheckpointNotFoundError",
    "CheckpointView",
    "ChecksumError",
    "ClosedError",
    "DEFAULT_CHUNK_BYTES",
    "DTYPES",
    "FORMAT_VERSION",
    "FormatError",
    "InvalidIndexError",
    "InvalidInputError",
    "LazyStoreError",
    "MissingDependencyError",
    "RemoteError",
    "TensorInfo",
    "TensorNotFoundError",
    "TensorSlice",
    "UnsupportedDtypeError",
    "UnsupportedVersionError",
    "VerificationUnavailableError",
    "Writer",
    "ZstdPlanes",
    "__version__",
    "load",
    "open",
    "save",
]
