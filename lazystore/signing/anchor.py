"""Trust anchors: what an open checks a checkpoint's index against before
it reads anything else.

``ls.open(path, public_key=...)`` builds a signature anchor: the ``.sig``
is read and verified first (its key, its signature, its statement), then
the file's index, read as every open reads it (the tail only), is checked
against the signed claims. ``ls.open(path, index_sha256=...)`` builds a
pinned anchor: the index's SHA-256 must be the one given. Either way the
index must record chunk digests, and the view then checks every chunk it
reads against them (it is opened with ``verify=True``), so nothing it hands
out is unvouched for.

An anchor meets the open path in two places (see
:func:`lazystore.interop.detect.open_view` and
:func:`lazystore.interop.sharded.open_folder`): ``reader`` wraps a file's
index reader, and a folder anchor checks ``lazystore.index.json`` and gives
each shard its own file anchor.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from lazystore._native import layout as fmt
from lazystore.errors import InvalidInputError, SignatureError
from lazystore.signing import claims as signed
from lazystore.signing import keys
from lazystore.signing.bundles import verified_statement
from lazystore.signing.statement import FOLDER_SIGNATURE_NAME, Statement
from lazystore.sources import local_path, open_source

SIGNATURE_SUFFIX = ".sig"
_HEX = frozenset("0123456789abcdef")


def index_reader(kind: str, read, name: str, refusal: type[Exception], on_bytes, on_index):
    """``read`` (a format's index reader, of the file ``name``) calling
    ``on_bytes(size, trailer, index_bytes)`` before the index is parsed and
    ``on_index(index)`` after; ``refusal`` (an exception class) for a file
    that is not lazystore's, which records no chunk digests to vouch for."""
    if kind != "lazystore":
        raise refusal(f"{name}: a {kind} file; only lazystore files record the chunk digests a signature "
                      f"or pinned index vouches for: {signed.CONVERT_HINT}")

    def checked(source):
        index, version = read(source, index_check=on_bytes)
        on_index(index)
        return index, version

    return checked


class FileAnchor:
    """What one file's index must be: ``check(size, trailer, index_bytes,
    where)`` raises SignatureError if it is not; ``digest`` is the digest
    algorithm the claims name (None: any)."""

    def __init__(self, check: Callable[[int, fmt.Trailer, memoryview, str], None], digest: str | None = None):
        self._check = check
        self._digest = digest

    def reader(self, kind: str, read, name: str):
        """``read`` (a format's index reader), checking the index first."""
        return index_reader(kind, read, name, SignatureError,
                            lambda size, trailer, buf: self._check(size, trailer, buf, name),
                            lambda index: signed.check_digests(index.system_metadata, self._digest, name))

    def file(self) -> FileAnchor:
        return self

    def folder(self, folder) -> FolderAnchor:
        raise SignatureError(f"{folder}: a folder, but the signature or pinned index is for a file")


class _Refused:
    """The file anchor of a folder's signature: no file is what it signs."""

    def reader(self, kind: str, read, name: str):
        raise SignatureError(f"{name}: a file, but the signature is for a folder of shards")


class FolderAnchor:
    """A signed sharded folder: its ``lazystore.index.json`` and each shard's index."""

    def __init__(self, folder_claims: dict, where: str):
        self._claims = folder_claims
        self._where = where

    def check_index_json(self, data: bytes, path) -> None:
        signed.check_sha256(data, self._claims["index_json_sha256"], str(path), f"signature {self._where}")

    def file(self) -> _Refused:
        return _Refused()

    def folder(self, folder) -> FolderAnchor:
        return self

    def shard(self, name: str) -> FileAnchor:
        """The anchor of the shard file ``name``."""
        shard = self._claims["shards"].get(name)
        if shard is None:
            raise SignatureError(f"{name}: a shard the signature {self._where} does not cover")
        return FileAnchor(lambda size, trailer, buf, where: signed.check_index(shard, size, trailer, buf, where),
                          shard["digest"])


def anchor_for(path, *, public_key=None, signature=None, index_sha256=None, storage_options=None):
    """The anchor ``ls.open`` checks ``path`` against, or None when neither
    ``public_key`` nor ``index_sha256`` is given (an ordinary open)."""
    if public_key is None:
        if signature is not None:
            raise InvalidInputError("signature= names the .sig that public_key= checks: give public_key= too")
        if index_sha256 is None:
            return None
        pinned = _hex_digest(index_sha256)
        if is_folder(path):
            raise InvalidInputError(f"{path}: index_sha256= pins one file's index; a folder of shards has one "
                                    "per shard: sign the folder (lazystore sign DIR) and open it with public_key=")
        return FileAnchor(lambda size, trailer, buf, where: signed.check_sha256(buf, pinned, where,
                                                                                "pinned index_sha256"))
    if index_sha256 is not None:
        raise InvalidInputError("give public_key= (a signature) or index_sha256= (a pinned index), not both")
    folder = is_folder(path)
    sig = signature if signature is not None else default_signature(path, folder)
    return anchor_of(signed_statement(path, public_key, sig, storage_options), folder, os.fspath(sig))


def signed_statement(path, public_key, sig, storage_options=None) -> Statement:
    """The statement of the signature at ``sig`` of the checkpoint at
    ``path``, once ``public_key`` is shown to have signed it."""
    key = keys.load_public_key(public_key)
    return verified_statement(read_signature(sig, path, storage_options), key, os.fspath(sig))


def anchor_of(statement: Statement, folder: bool, where: str):
    """The anchor of a verified statement, for a folder or a file; where
    (the .sig) names it in errors."""
    if folder:
        return FolderAnchor(signed.checked(statement.claims, "folder", where), where)
    file_claims = signed.checked(statement.claims, "file", where)
    return FileAnchor(lambda size, trailer, buf, name: signed.check_index(file_claims, size, trailer, buf, name),
                      file_claims["digest"])


def refuse_unchecked(verify: bool, public_key, index_sha256) -> None:
    """InvalidInputError for ``verify=False`` with a signature or pin: a
    vouched-for load checks every tensor, and the flag would be ignored."""
    if not verify and (public_key is not None or index_sha256 is not None):
        raise InvalidInputError("a signed or pinned load checks every tensor it returns: verify=False cannot go "
                                "with public_key= or index_sha256=")


def default_signature(path, folder: bool):
    """Where a checkpoint's signature is by default: ``FILE.sig`` beside a
    file (a URL's too), ``DIR/model.sig`` in a folder (model_signing's name)."""
    if folder:
        return Path(path) / FOLDER_SIGNATURE_NAME
    return os.fspath(path) + SIGNATURE_SUFFIX if isinstance(path, str) else Path(os.fspath(path) + SIGNATURE_SUFFIX)


def read_signature(sig, checkpoint, storage_options=None) -> bytes:
    """The bytes of the ``.sig`` at ``sig`` (a path or URL, read through the
    same storage as the checkpoint); SignatureError if there is none."""
    try:
        source = open_source(sig, storage_options, mmap=False)
    except (FileNotFoundError, IsADirectoryError):
        local = local_path(checkpoint)
        if local is not None and not os.path.exists(local):  # no checkpoint: say that, not "unsigned"
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), local) from None
        raise SignatureError(f"{os.fspath(checkpoint)} is not signed: no signature at {os.fspath(sig)} (a "
                             "stripped or missing .sig; give signature= if it is elsewhere)") from None
    try:
        return bytes(source.read(0, source.size))
    finally:
        source.close()


def is_folder(path) -> bool:
    local = local_path(path)
    return local is not None and os.path.isdir(local)


def _hex_digest(value) -> str:
    text = value.hex() if isinstance(value, (bytes, bytearray)) else value
    if not isinstance(text, str) or len(text) != 64 or not set(text.lower()) <= _HEX:
        raise InvalidInputError(f"index_sha256 is a SHA-256 as 64 hex characters (what `lazystore info` prints), "
                                f"got {value!r}")
    return text.lower()


__all__ = ["FileAnchor", "FolderAnchor", "anchor_for", "anchor_of", "default_signature", "index_reader", "is_folder",
           "read_signature",
           "refuse_unchecked", "signed_statement"]
