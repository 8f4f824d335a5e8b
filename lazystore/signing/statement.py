"""The in-toto Statement v1 a signature carries: OpenSSF model_signing's
predicate (``https://model_signing/signature/v1.0``), plus lazystore's own
member.

model_signing's predicate lists the model's files ("resources") with their
SHA-256, under a "files" serialization; the statement's one subject is the
model's name with the SHA-256 of those digests concatenated in order. That
is what ``model_signing verify`` checks, by hashing every file again.

lazystore adds ``predicate.lazystore``, the claims that let it check a
checkpoint without reading it whole: where the index is, how long, and its
SHA-256 (see :mod:`lazystore.signing.claims`). model_signing's verifiers
ignore members of the predicate they do not know, as its v1.0 predicate
says they must.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from lazystore.errors import SignatureError

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"
LAZYSTORE_MEMBER = "lazystore"
# The paths model_signing leaves out of a folder by default; a folder's
# signature leaves itself out too (model_signing's default name).
IGNORED_PATHS = (".github", ".git", ".gitattributes", ".gitignore")
FOLDER_SIGNATURE_NAME = "model.sig"
# model_signing names the resource of a model that is one file ".".
SINGLE_FILE_RESOURCE = "."


@dataclass(frozen=True)
class Statement:
    """What a verified payload says: the subject's name, each resource's
    SHA-256 (hex) by name, and lazystore's claims (None in a statement
    model_signing wrote)."""

    subject: str
    resources: dict[str, str]
    claims: dict | None
    ignored: tuple[str, ...] = ()  # the serialization's ignore_paths


def encode(subject: str, resources: dict[str, str], claims: dict, ignore_paths: tuple[str, ...]) -> bytes:
    """The statement's JSON bytes. ``resources`` maps each file's name (its
    path in the folder, posix, or "." for a single file) to its SHA-256
    (hex); they are listed sorted by name, as model_signing lists them."""
    names = sorted(resources)
    root = hashlib.sha256(b"".join(bytes.fromhex(resources[n]) for n in names)).hexdigest()
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject, "digest": {"sha256": root}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False,
                              "ignore_paths": list(ignore_paths)},
            "resources": [{"name": n, "algorithm": "sha256", "digest": resources[n]} for n in names],
            LAZYSTORE_MEMBER: claims,
        },
    }
    return json.dumps(statement, indent=2).encode("utf-8")


def decode(payload: bytes, where: str) -> Statement:
    """The statement of a verified payload, checked to be model_signing's
    predicate with sha256 file resources whose digests hash to the subject's."""
    try:
        statement = json.loads(payload)
        if statement["_type"] != STATEMENT_TYPE or statement["predicateType"] != PREDICATE_TYPE:
            raise SignatureError(f"{where}: signs a {statement['predicateType']!r} statement, not a model "
                                 f"signature ({PREDICATE_TYPE})")
        (subject,) = statement["subject"]
        predicate = statement["predicate"]
        resources = {}
        for r in predicate["resources"]:
            if r["algorithm"] != "sha256":
                raise SignatureError(f"{where}: resource {r['name']!r} is hashed with {r['algorithm']}; "
                                     "lazystore checks sha256 resources")
            resources[r["name"]] = bytes.fromhex(r["digest"]).hex()
        ordered = b"".join(bytes.fromhex(resources[r["name"]]) for r in predicate["resources"])
        if hashlib.sha256(ordered).hexdigest() != subject["digest"]["sha256"]:
            raise SignatureError(f"{where}: the statement's subject digest does not match its resources")
        claims = predicate.get(LAZYSTORE_MEMBER)
        if claims is not None and not isinstance(claims, dict):
            raise TypeError("predicate.lazystore is not an object")
        ignored = predicate["serialization"].get("ignore_paths") or ()
        return Statement(str(subject["name"]), resources, claims, tuple(str(p) for p in ignored))
    except SignatureError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise SignatureError(f"{where}: a signed payload that is not a model signature statement "
                             f"({type(exc).__name__}: {exc})") from None


__all__ = ["FOLDER_SIGNATURE_NAME", "IGNORED_PATHS", "PREDICATE_TYPE", "SINGLE_FILE_RESOURCE", "STATEMENT_TYPE",
           "Statement", "decode", "encode"]
