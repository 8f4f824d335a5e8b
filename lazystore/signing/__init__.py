"""Signatures that verify lazily: a detached Sigstore bundle (``FILE.sig``)
over an in-toto statement in OpenSSF model_signing's layout, plus claims
about the file's index, so that opening a signed checkpoint checks the
signature by reading only the index, and each read checks its chunks'
digests. See docs/signing.md."""

from lazystore.signing.recorder import index_sha256
from lazystore.signing.signer import sign
from lazystore.signing.verifying import verify

__all__ = ["index_sha256", "sign", "verify"]
