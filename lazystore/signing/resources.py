"""model_signing's "files" serialization: the SHA-256 of every file of a
model, by name, as the statement's resources list them and as
``model_signing verify`` recomputes them.

A model that is one file has one resource, named "."; a folder's resources
are its regular files, recursively, named by their posix path in the
folder, leaving out the ignored paths (``.git`` and the like, and the
signature itself). Symbolic links are refused, as model_signing refuses them
when ``allow_symlinks`` is false.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path, PurePosixPath

from lazystore.errors import InvalidInputError
from lazystore.signing.statement import SINGLE_FILE_RESOURCE

# Read in blocks this large: SHA-256 releases the GIL for each.
BLOCK_BYTES = 8 << 20


def sha256_of(path) -> str:
    """The SHA-256 (hex) of a whole file, read in blocks."""
    h = hashlib.sha256()
    buf = bytearray(BLOCK_BYTES)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def folder_files(folder: Path, ignored: tuple[str, ...]) -> list[str]:
    """The names of a folder's files that are resources, sorted."""
    skip = {PurePosixPath(p) for p in ignored}
    names = []
    for root, dirs, files in os.walk(folder):
        rel = PurePosixPath(Path(root).relative_to(folder).as_posix())
        dirs[:] = [d for d in dirs if rel / d not in skip]
        for f in files:
            name = rel / f
            if name in skip:
                continue
            if os.path.islink(os.path.join(root, f)):
                raise InvalidInputError(f"{folder}: {name} is a symbolic link; a signature covers regular "
                                        "files only (model_signing's allow_symlinks is false)")
            names.append(str(name))
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                raise InvalidInputError(f"{folder}: {rel / d} is a symbolic link; a signature covers regular "
                                        "files only")
    return sorted(names)


def ignoring(signature: Path, folder: Path, ignored: tuple[str, ...]) -> tuple[str, ...]:
    """``ignored``, plus the signature's own name when it lies in ``folder``:
    a folder's signature cannot cover itself."""
    try:
        inside = signature.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:  # elsewhere
        return ignored
    return ignored if inside in ignored else (inside, *ignored)


def resources_of(path: Path, ignored: tuple[str, ...]) -> dict[str, str]:
    """Every resource of the model at ``path`` (a file or a folder) with its SHA-256."""
    if not path.is_dir():
        return {SINGLE_FILE_RESOURCE: sha256_of(path)}
    return {name: sha256_of(path / name) for name in folder_files(path, ignored)}


__all__ = ["folder_files", "ignoring", "resources_of", "sha256_of"]
