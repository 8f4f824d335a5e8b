"""Verifying a signed checkpoint from the command line or Python:
:func:`verify` (and :func:`check`, which the CLI uses to name what fails).

Three depths:

- lazy: the signature and the index it vouches for (what ``ls.open(path,
  public_key=...)`` checks before reading anything else);
- full (the default): then every chunk against its digest, the padding and
  the preamble (``verify()`` of the view, in digest mode): every byte;
- whole files (``model_signing=True``): then also the SHA-256 of each file,
  the resources OpenSSF model_signing checks.

A signature written by model_signing itself carries no lazystore claims:
only whole-file checking applies to it, and the lazy depth refuses it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lazystore.errors import InvalidInputError, SignatureError
from lazystore.interop.folders import open_path
from lazystore.signing.anchor import anchor_of, default_signature, is_folder, signed_statement
from lazystore.signing.resources import ignoring, resources_of
from lazystore.signing.statement import Statement
from lazystore.sources import local_path


def check(path, public_key, *, signature=None, lazy: bool = False, whole_files: bool = False,
          storage_options=None, verify_view: Callable | None = None, encryption_key=None) -> list[str]:
    """The names of tensors that fail their signed digests (``[]``: intact).
    A signature or index that does not vouch for ``path`` raises
    SignatureError. ``verify_view(view)`` runs the full check of the open
    view (default: ``view.verify()``; the CLI adds a progress bar). An
    encrypted checkpoint's digests cover its sealed bytes, so it is checked
    without its key; with ``encryption_key`` the key and the index MAC are
    checked too."""
    folder = is_folder(path)
    sig = signature if signature is not None else default_signature(path, folder)
    where = os.fspath(sig)
    statement = signed_statement(path, public_key, sig, storage_options)
    if statement.claims is None and not lazy:  # model_signing's own: its files are all it vouches for
        _check_files(path, statement, sig)
        return []
    anchor = anchor_of(statement, folder, where)  # refuses claims it cannot check
    # Streamed (no mapping): a full check reads every byte once.
    with open_path(path, verify=True, storage_options=storage_options, mmap=False, anchor=anchor,
                   encryption_key=encryption_key) as view:
        bad = [] if lazy else (verify_view or _verify_all)(view)
    if whole_files and not lazy:
        _check_files(path, statement, sig)
    return bad


def verify(path: str | os.PathLike[str], public_key: object, *, signature: str | os.PathLike[str] | None = None,
           lazy: bool = False, model_signing: bool = False, storage_options: Mapping[str, Any] | None = None) -> None:
    """Check the signature of a checkpoint; raise SignatureError if it does not vouch for every byte checked.

    By default every chunk is checked against its digest, and the padding
    and preamble too. A signature written by model_signing is checked by
    whole files (it vouches for those only), and refused with
    ``lazy=True``.

    Parameters
    ----------
    path : str or os.PathLike
        A lazystore file, a URL, or a folder of lazystore shards.
    public_key : str, os.PathLike, bytes or public key
        A PEM file's path, PEM bytes or a ``cryptography`` public key.
    signature : str or os.PathLike, optional
        The signature to check (default ``FILE.sig`` beside a file,
        ``DIR/model.sig`` in a folder).
    lazy : bool, optional
        Check the signature and the index only (reading the file's tail),
        as ``ls.open(path, public_key=...)`` does.
    model_signing : bool, optional
        Also recompute each file's SHA-256, what OpenSSF model_signing
        verifies (local checkpoints only).
    storage_options : Mapping, optional
        Options of a URL's fsspec filesystem; local paths ignore them.

    Raises
    ------
    SignatureError
        The signature is missing, forged or made with another key or for
        another file or index, or tensors do not match their signed
        digests (the message names them), or (``model_signing=True``) a
        file's SHA-256 differs.
    InvalidInputError
        ``lazy`` and ``model_signing`` together, a key that is not a public
        key lazystore checks, or whole files asked of a remote checkpoint.
    MissingDependencyError
        ``cryptography`` is not installed (the ``crypto`` extra).
    """
    if model_signing and lazy:
        raise InvalidInputError("lazy=True checks the index only; model_signing=True hashes every file: choose one")
    bad = check(path, public_key, signature=signature, lazy=lazy, whole_files=model_signing,
                storage_options=storage_options)
    if bad:
        shown = ", ".join(repr(n) for n in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        raise SignatureError(f"{os.fspath(path)}: {len(bad)} tensor(s) do not match their signed digests: {shown}")


def _verify_all(view) -> list[str]:
    return view.verify()


def _check_files(path, statement: Statement, sig) -> None:
    """SignatureError unless every file's SHA-256 is the statement's, and
    the folder holds no file the statement leaves out (model_signing's check)."""
    local = local_path(path)
    if local is None:
        raise InvalidInputError(f"{path}: hashing whole files (model_signing's check) needs a local checkpoint")
    model = Path(local)
    ignored = ignoring(Path(os.fspath(sig)), model, statement.ignored) if model.is_dir() else statement.ignored
    found = resources_of(model, ignored)
    expected = statement.resources
    problems = [f"{n}: hash mismatch" for n in sorted(set(found) & set(expected)) if found[n] != expected[n]]
    problems += [f"{n}: not signed (an extra file)" for n in sorted(set(found) - set(expected))]
    problems += [f"{n}: missing" for n in sorted(set(expected) - set(found))]
    if problems:
        raise SignatureError(f"{os.fspath(path)}: does not match {os.fspath(sig)}: " + "; ".join(problems[:8]))


__all__ = ["check", "verify"]
