"""Checking a signature bundle: the key it names, the signature over its
envelope, and the statement it carries (steps 1-4 of a lazy open; the index
itself is checked by :mod:`lazystore.signing.anchor`)."""

from __future__ import annotations

from lazystore.errors import SignatureError
from lazystore.signing import keys
from lazystore.signing.dsse import IN_TOTO_PAYLOAD_TYPE, pae, read_bundle
from lazystore.signing.statement import Statement, decode


def verified_statement(bundle: bytes, public_key, where: str) -> Statement:
    """The statement of the bundle's bytes, once ``public_key`` is shown to
    have signed it; SignatureError naming ``where`` (the .sig) otherwise."""
    envelope = read_bundle(bundle, where)
    hint = keys.key_hint(public_key)
    if envelope.key_hint and envelope.key_hint != hint:
        raise SignatureError(f"{where}: signed with another key (its key hint is {envelope.key_hint}, this public "
                             f"key's is {hint})")
    if envelope.payload_type != IN_TOTO_PAYLOAD_TYPE:
        raise SignatureError(f"{where}: signs a {envelope.payload_type!r} payload, not an in-toto statement")
    keys.check_signature(public_key, envelope.signature, pae(envelope.payload_type, envelope.payload), where)
    return decode(envelope.payload, where)


__all__ = ["verified_statement"]
