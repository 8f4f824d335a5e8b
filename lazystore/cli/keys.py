"""Where the command line gets an encryption key: the environment variable
``LAZYSTORE_ENCRYPTION_KEY`` (64 hex digits) or ``--key-file PATH`` (32 raw
bytes, or 64 hex digits). Never an argument: a key on the command line
would be in the shell's history and in every process listing."""

from __future__ import annotations

import os
import re

from lazystore.cli.errors import CliError

ENV_VAR = "LAZYSTORE_ENCRYPTION_KEY"
KEY_BYTES = 32
_HEX_KEY = re.compile(rb"[0-9a-fA-F]{64}")


def add_key_option(parser, what: str) -> None:
    parser.add_argument("--key-file", metavar="PATH", default=None,
                        help=f"the encryption key that {what}: a file of 32 raw bytes or 64 hex digits "
                             f"(or set {ENV_VAR} to 64 hex digits; never give a key as an argument)")


def key_from(args) -> bytes | None:
    """The key ``--key-file`` names (it wins), or the environment's, or None."""
    path = getattr(args, "key_file", None)
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = f.read(200)
        except OSError as exc:
            # Not named: a key mistyped where its file's path goes must not reach a log.
            raise CliError(f"cannot read the file --key-file names: {exc.strerror or exc}") from None
        key = _parsed(data, exact=True)
        if key is None:
            raise CliError("the file --key-file names must hold 32 raw bytes or 64 hex digits")
        return key
    text = os.environ.get(ENV_VAR)
    if text is None:
        return None
    key = _parsed(text.encode("utf-8", "replace"), exact=False)
    if key is None:
        raise CliError(f"{ENV_VAR} must be 64 hex digits (32 bytes)")  # never echo what it holds
    return key


def _parsed(data: bytes, *, exact: bool) -> bytes | None:
    stripped = data.strip()
    if _HEX_KEY.fullmatch(stripped):
        return bytes.fromhex(stripped.decode("ascii"))
    if exact and len(data) == KEY_BYTES:
        return data
    return None
