"""DSSE envelopes in Sigstore bundles (v0.3, JSON): the ``.sig`` file.

A bundle carries one DSSE envelope: a payload (here an in-toto statement),
its type, and a signature over the envelope's PAE ("pre-authentication
encoding", which binds the type to the payload). Key-based bundles name the
key by a hint (see :func:`lazystore.signing.keys.key_hint`) and carry no
transparency-log entries. This is the layout OpenSSF model_signing writes
and reads for its key-based signatures, field for field.

See https://github.com/secure-systems-lab/dsse/blob/v1.0.0/protocol.md and
https://docs.sigstore.dev/about/bundle/.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from lazystore.errors import SignatureError

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
# A .sig larger than this is not one lazystore (or model_signing) wrote: a
# folder of 10 000 shards signs in about 3 MB.
MAX_BUNDLE_BYTES = 64 << 20


@dataclass(frozen=True)
class Envelope:
    """What a bundle says: the payload, its type, the signature over their
    PAE, and the hint naming the key (None when the bundle gives none)."""

    payload: bytes
    payload_type: str
    signature: bytes
    key_hint: str | None


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def write_bundle(envelope: Envelope) -> bytes:
    """The bundle's JSON bytes (compact, in model_signing's member order)."""
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {"publicKey": {"hint": envelope.key_hint}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": base64.b64encode(envelope.payload).decode("ascii"),
            "payloadType": envelope.payload_type,
            "signatures": [{"sig": base64.b64encode(envelope.signature).decode("ascii"), "keyid": ""}],
        },
    }
    return json.dumps(bundle, separators=(",", ":")).encode("utf-8")


def read_bundle(data: bytes, where: str) -> Envelope:
    """The envelope of a bundle's JSON bytes; SignatureError naming ``where``
    (the .sig's path) if they are not a key-based Sigstore bundle v0.3."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise SignatureError(f"{where}: {len(data)} bytes is not a signature bundle")
    try:
        bundle = json.loads(data)
        media = bundle["mediaType"]
        material = bundle.get("verificationMaterial") or {}
        envelope = bundle["dsseEnvelope"]
        signatures = envelope["signatures"]
        if media != BUNDLE_MEDIA_TYPE:
            raise SignatureError(f"{where}: a Sigstore bundle of media type {media!r}; lazystore reads "
                                 f"{BUNDLE_MEDIA_TYPE}")
        if material.get("certificate") or material.get("x509CertificateChain") or material.get("tlogEntries"):
            raise SignatureError(f"{where}: a keyless (Sigstore certificate) signature; lazystore verifies "
                                 "key-based signatures only: verify it with model_signing's "
                                 "`model_signing verify sigstore`")
        if not isinstance(signatures, list) or len(signatures) != 1:
            raise SignatureError(f"{where}: a DSSE envelope with {len(signatures)} signatures; expected one")
        hint = (material.get("publicKey") or {}).get("hint")
        payload_type = envelope["payloadType"]
        if not isinstance(payload_type, str) or not (hint is None or isinstance(hint, str)):
            raise TypeError("payloadType or hint is not a string")
        return Envelope(base64.b64decode(envelope["payload"], validate=True), payload_type,
                        base64.b64decode(signatures[0]["sig"], validate=True), hint)
    except SignatureError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, RecursionError) as exc:
        raise SignatureError(f"{where}: not a Sigstore signature bundle ({type(exc).__name__}: {exc})") from None


__all__ = ["BUNDLE_MEDIA_TYPE", "IN_TOTO_PAYLOAD_TYPE", "Envelope", "pae", "read_bundle", "write_bundle"]
