"""Signing a checkpoint: :func:`sign` writes its detached ``.sig``.

The signature is a Sigstore bundle holding a DSSE envelope over an in-toto
statement in OpenSSF model_signing's layout (so ``model_signing verify``
accepts it), with lazystore's claims about the index added (so lazystore
can verify it by reading the index only). The file itself is not changed.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from lazystore.errors import FormatError, InvalidInputError
from lazystore.interop.sharded import INDEX_NAME
from lazystore.signing import claims as signed
from lazystore.signing import keys, statement
from lazystore.signing.anchor import default_signature
from lazystore.signing.dsse import IN_TOTO_PAYLOAD_TYPE, Envelope, pae, write_bundle
from lazystore.signing.recorder import record
from lazystore.signing.resources import ignoring, resources_of
from lazystore.sources import local_path


def sign(path: str | os.PathLike[str], private_key: object, *,
         signature: str | os.PathLike[str] | None = None) -> Path:
    """Sign a checkpoint: write its detached signature (``.sig``).

    The file must record chunk digests (``lazystore convert FILE OUT
    --digest blake3`` adds them); a format 1.2 delta (codec 2) is refused.

    Signing reads the index, and the whole file once for the SHA-256 that
    OpenSSF model_signing checks (an ECDSA signature verifies with
    ``model_signing verify key``; an Ed25519 one only with lazystore).
    ECDSA signatures are deterministic: signing the same file with the same
    key gives the same bytes.

    Parameters
    ----------
    path : str or os.PathLike
        A local lazystore file, or a folder of lazystore shards.
    private_key : str, os.PathLike, bytes or private key
        A PEM file's path, PEM bytes, or a ``cryptography`` ECDSA
        P-256/P-384/P-521 or Ed25519 private key; an encrypted PEM's
        password comes from ``LAZYSTORE_KEY_PASSWORD``.
    signature : str or os.PathLike, optional
        Where to write the signature (default ``FILE.sig`` beside a file,
        ``DIR/model.sig`` in a folder).

    Returns
    -------
    pathlib.Path
        The signature's path.

    Raises
    ------
    InvalidInputError
        ``path`` is not local, records no chunk digests, is a format 1.2
        delta or a folder that is not a lazystore sharded checkpoint; or the
        key is not a private key lazystore signs with.
    FormatError
        A folder's ``lazystore.index.json`` is corrupt.
    MissingDependencyError
        ``cryptography`` is not installed (the ``crypto`` extra).
    """
    key = keys.load_private_key(private_key)
    local = local_path(path)
    if local is None:
        raise InvalidInputError(f"{path}: sign writes a .sig beside a local checkpoint; sign the file before "
                                "uploading it, then upload FILE.sig beside it")
    model = Path(local)
    folder = model.is_dir()
    out = Path(os.fspath(signature)) if signature is not None else Path(default_signature(model, folder))
    if folder:
        payload = _folder_statement(model, out)
    else:
        recorder = record(model, need_digests=True)
        resources = resources_of(model, statement.IGNORED_PATHS)
        payload = statement.encode(model.name, resources, signed.file_claims(recorder.claims),
                                   statement.IGNORED_PATHS)
    signature_bytes = keys.sign_bytes(key, pae(IN_TOTO_PAYLOAD_TYPE, payload))
    bundle = write_bundle(Envelope(payload, IN_TOTO_PAYLOAD_TYPE, signature_bytes, keys.key_hint(key.public_key())))
    _write_atomically(out, bundle)
    return out


def _folder_statement(folder: Path, out: Path) -> bytes:
    """The statement of a sharded folder: every file's SHA-256 (leaving out
    the signature, when it is in the folder), and the claims of
    ``lazystore.index.json`` and of each shard's index."""
    index_path = folder / INDEX_NAME
    try:
        index_json = index_path.read_bytes()
    except FileNotFoundError:
        raise InvalidInputError(f"{folder}: a folder, but not a lazystore sharded checkpoint (no {INDEX_NAME}); "
                                "sign a checkpoint file by its path") from None
    try:
        weight_map = json.loads(index_json)["weight_map"]
        shard_names = list(dict.fromkeys(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"{index_path}: corrupt index ({exc})") from None
    shards = {}
    for name in shard_names:
        if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
            raise FormatError(f"{index_path}: corrupt index: shard {name!r} is not a file name in the folder")
        shards[name] = record(folder / name, need_digests=True).claims
    ignored = ignoring(out, folder, statement.IGNORED_PATHS)
    return statement.encode(folder.name, resources_of(folder, ignored), signed.folder_claims(index_json, shards),
                            ignored)


def _write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the
    new, whole. The file is created as ``open`` creates files (its mode
    from the umask: a signature is public), then renamed over ``path``."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.partial")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


__all__ = ["sign"]
