"""lazystore's claims in a signature (``predicate.lazystore``), and the
checks of an index against them.

The index of a lazystore file is its whole meaning: names, dtypes, shapes,
offsets, codecs, checksums, every chunk's cryptographic digest, metadata.
A signature that vouches for the index's SHA-256, and for where the index
lies in the file (offset, length, file size), vouches for every byte a
reader takes from the file, as long as the reader checks each chunk's
digest as it reads it (what opening with ``verify=True`` does in a file
with digests). The preamble and the padding are covered by the format's own
rules; the trailer by the offset, length and version claimed here.

A file's claims::

    {"version": 1, "kind": "file", "format": "1.4", "file_size": N,
     "index_offset": O, "index_length": L, "index_sha256": hex, "digest": "blake3"}

A sharded folder's: ``{"version": 1, "kind": "folder", "index_json_sha256":
hex, "shards": {file name: a file's claims less "version" and "kind"}}``.
"""

from __future__ import annotations

import hashlib

from lazystore._native import layout as fmt
from lazystore._native.chunk_digests import DIGEST_KEY
from lazystore.codecs import DeltaPlanes
from lazystore.errors import InvalidInputError, SignatureError

CLAIMS_VERSION = 1
CONVERT_HINT = "lazystore convert FILE OUT --digest blake3"
_FILE_FIELDS = ("format", "file_size", "index_offset", "index_length", "index_sha256", "digest")


def of_index(size: int, trailer: fmt.Trailer, index_sha256: str, system_metadata: dict, where: str) -> dict:
    """The claims for a file whose index hashes to ``index_sha256``: refused
    (InvalidInputError) for a file a signature cannot vouch for chunk by
    chunk: one without chunk digests, or a format 1.2 delta (codec 2), whose
    chunks are coded against a whole other file rather than its content."""
    member = system_metadata.get(DIGEST_KEY)
    if not isinstance(member, dict) or not isinstance(member.get("algorithm"), str):
        raise InvalidInputError(f"{where}: sign needs chunk digests, which this file does not record: "
                                f"{CONVERT_HINT}")
    return {"format": f"{trailer.major}.{trailer.minor}", "file_size": size, "index_offset": trailer.index_offset,
            "index_length": trailer.index_length, "index_sha256": index_sha256,
            "digest": member["algorithm"]}


def refuse_legacy_delta(codecs, where: str) -> None:
    """InvalidInputError if any tensor is a format 1.2 delta (codec 2)."""
    if DeltaPlanes.id in set(int(c) for c in codecs):
        raise InvalidInputError(f"{where}: a format 1.2 delta (codec 2), coded against its base file's exact "
                                f"bytes, cannot be signed; rewrite it as a whole file: {CONVERT_HINT}")


def file_claims(claims: dict) -> dict:
    """A single file's claims, as the signature carries them."""
    return {"version": CLAIMS_VERSION, "kind": "file", **claims}


def folder_claims(index_json: bytes, shards: dict[str, dict]) -> dict:
    return {"version": CLAIMS_VERSION, "kind": "folder", "index_json_sha256": hashlib.sha256(index_json).hexdigest(),
            "shards": shards}


def checked(claims, kind: str, where: str) -> dict:
    """``claims`` (the statement's lazystore member), refused unless they are
    claims of ``kind`` ("file" or "folder") that this lazystore reads."""
    if claims is None:
        raise SignatureError(
            f"{where}: this signature (written by model_signing, or another tool) vouches for the file's "
            "SHA-256 alone, not for its index, so it cannot be checked lazily: check it whole with "
            "`lazystore verify FILE --key PUB.pem` (or lazystore.signing.verify), or sign the file with "
            "`lazystore sign` for lazy checks")
    if claims.get("version") != CLAIMS_VERSION:
        raise SignatureError(f"{where}: lazystore claims of version {claims.get('version')!r}; this lazystore "
                             f"reads version {CLAIMS_VERSION}: upgrade lazystore")
    if claims.get("kind") != kind:
        raise SignatureError(f"{where}: signs a {claims.get('kind')}, but a {kind} is being opened")
    if kind == "folder":
        shards = claims.get("shards")
        if not isinstance(shards, dict) or not isinstance(claims.get("index_json_sha256"), str):
            raise SignatureError(f"{where}: malformed folder claims")
        for name, shard in shards.items():
            _check_fields(shard, f"{where} (shard {name})")
    else:
        _check_fields(claims, where)
    return claims


def _check_fields(claims, where: str) -> None:
    if not isinstance(claims, dict) or any(k not in claims for k in _FILE_FIELDS):
        raise SignatureError(f"{where}: malformed lazystore claims (needs {', '.join(_FILE_FIELDS)})")


def check_index(claims: dict, size: int, trailer: fmt.Trailer, index, where: str) -> None:
    """SignatureError unless the file's index is the one ``claims`` vouch for."""
    found = {"format": f"{trailer.major}.{trailer.minor}", "file_size": size, "index_offset": trailer.index_offset,
             "index_length": trailer.index_length}
    for key, value in found.items():
        if claims[key] != value:
            raise SignatureError(f"{where}: not the file that was signed: its {key.replace('_', ' ')} is "
                                 f"{value}, the signature says {claims[key]}")
    check_sha256(index, claims["index_sha256"], where, "signature")


def check_sha256(index, expected: str, where: str, by: str) -> None:
    """SignatureError unless the index bytes hash to ``expected`` (hex)."""
    actual = hashlib.sha256(index).hexdigest()
    if actual != str(expected).lower():
        raise SignatureError(f"{where}: the index is not the one the {by} vouches for (index sha256 {actual}, "
                             f"expected {expected}): it was changed after signing, or this is another file")


def check_digests(system_metadata: dict, claimed: str | None, where: str) -> None:
    """SignatureError unless the (vouched-for) index records chunk digests,
    with the algorithm the claims name: without them only the index would
    be covered, not the bytes of the tensors."""
    member = system_metadata.get(DIGEST_KEY)
    algorithm = member.get("algorithm") if isinstance(member, dict) else None
    if algorithm is None:
        raise SignatureError(f"{where}: records no chunk digests, so its index alone can be vouched for, not "
                             f"its tensors: {CONVERT_HINT}, then sign or pin that file")
    if claimed is not None and algorithm != claimed:
        raise SignatureError(f"{where}: its chunk digests are {algorithm}, the signature says {claimed}")


__all__ = ["CONVERT_HINT", "check_digests", "check_index", "check_sha256", "checked", "file_claims", "folder_claims",
           "of_index", "refuse_legacy_delta"]
