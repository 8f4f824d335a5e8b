"""``lazystore sign``, and ``lazystore verify --key``: signatures over the
public :mod:`lazystore.signing` functions.

A signature that does not vouch for the checkpoint (missing, forged, made
with another key, for another file or index) is a finding, as a corrupt
tensor is: exit code 1, never 2 (2 stays for input that cannot be read).
"""

from __future__ import annotations

import lazystore as ls
from lazystore import signing
from lazystore.cli.errors import CliError, about
from lazystore.cli.keys import key_from
from lazystore.cli.text import one_value, plural
from lazystore.signing.verifying import check


def cmd_sign(args) -> int:
    with about(args.path):
        out = signing.sign(args.path, args.key, signature=args.signature)
    print(f"{one_value(args.path)}: signed, signature written to {one_value(str(out))}")
    return 0


def refuse_options_without_key(args) -> None:
    """``--signature``, ``--lazy`` and ``--model-signing`` are about a signature: they need ``--key``."""
    given = [flag for flag, on in (("--signature", args.signature is not None), ("--lazy", args.lazy),
                                   ("--model-signing", args.model_signing)) if on]
    if given:
        raise CliError(f"{', '.join(given)} check(s) a signature: give the public key with --key PUBLIC.pem")


def verify_signed(args, verify_view) -> tuple[list[str], int, str]:
    """The corrupt tensors of a signed checkpoint, how many tensors it has
    (0 if not opened), and what to report when none is corrupt;
    ``verify_view(view)`` checks every chunk of the open view."""
    if args.lazy and args.model_signing:
        raise CliError("--lazy checks the signature and index only; --model-signing hashes every file: choose one")
    count: list[int] = []

    def full(view):
        count.append(len(view))
        return verify_view(view)

    try:
        with about(args.path):
            bad = check(args.path, args.key, signature=args.signature, lazy=args.lazy,
                                whole_files=args.model_signing, verify_view=full,
                        encryption_key=key_from(args))
    except CliError as exc:
        if isinstance(exc.__cause__, ls.SignatureError):
            raise CliError(str(exc), code=1) from exc
        raise
    if args.lazy:
        return bad, 0, "signature OK, index verified (chunks not read: --lazy)"
    if not count:  # a model_signing signature: it vouches for whole files only
        return bad, 0, "signature OK, every file matches its signed SHA-256"
    files = ", and every file its signed SHA-256" if args.model_signing else ""
    agree = "matches its" if count[0] == 1 else "match their"
    return bad, count[0], f"signature OK, {plural(count[0], 'tensor')} {agree} signed digests{files}"
