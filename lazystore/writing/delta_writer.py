"""Writing tensors as deltas against a base file (format 1.3, codec 3).

``Writer(path, base=earlier)`` codes each tensor that the base also holds,
under the same name with the same dtype and shape, against the base's
tensor: chunk by chunk, on the base's own chunk grid, so that a reader can
decode any one chunk from the base's chunk of the same number. A chunk
whose bytes equal the base's (compared byte for byte, never by hash) is
stored as nothing; any other is stored as the zigzag difference of the bit
patterns, zstd over byte planes (:mod:`lazystore.codecs.delta`). Each
chunk records the xxh3 of the base chunk's decoded bytes: the content it was
coded against, which is how a reader knows its base (a base rewritten with
the same content, recompressed or made a delta itself, stays valid).

A delta pays only if it is smaller than the tensor stored alone: optimizer
moments, say, change entirely from step to step. So the first chunk of each
tensor is coded both ways, and the tensor is stored alone (with the
writer's codec) unless its delta saves at least ``DELTA_MIN_SAVING``: a
tensor stored alone also reads without its base.
"""

from __future__ import annotations

import os
from functools import partial
from itertools import accumulate
from pathlib import Path

import numpy as np

from lazystore._core.checksum import digest
from lazystore._core.dtypes import DtypeSpec
from lazystore._core.parallel import run_all
from lazystore._native.base_ref import MAX_CHAIN, BaseRef
from lazystore.codecs import RAW, ContentDeltaPlanes
from lazystore.codecs.delta import word_size
from lazystore.errors import ChecksumError, InvalidInputError, TensorNotFoundError
from lazystore.sinks.targets import resolve as resolve_target
from lazystore.sources import local_path, open_in_folder
from lazystore.views.base_chain import in_base
from lazystore.views.checkpoint import CheckpointView

# A tensor is delta-coded only if its first chunk's delta is at least this
# much smaller than the chunk stored alone: a smaller gain is not worth
# tying the tensor to its base (every read of it then reads the base too).
DELTA_MIN_SAVING = 0.1


def open_beside_target(base, target) -> CheckpointView:
    """The view of ``base``, which must be another file in ``target``'s
    folder, opened as a reader of the delta file will open it (see
    lazystore.sources.safe_files): a regular file, by its name in the folder
    (a link only to a file in the folder), and not the target itself, told
    by device and inode (a link to the target would be replaced with it)."""
    base_path, target_path = local_path(base), local_path(target)
    if base_path is None or target_path is None:
        raise InvalidInputError("a delta checkpoint and its base must be local files")
    # A save through a symlink writes the file the link names, so the delta
    # lands there, and there is where a reader looks for its base.
    target_path = os.fspath(resolve_target(Path(target_path)))
    base_dir = os.path.realpath(os.path.dirname(os.path.abspath(base_path)))
    target_dir = os.path.realpath(os.path.dirname(os.path.abspath(target_path)))
    if base_dir != target_dir:
        raise InvalidInputError(f"the base {base_path} must be in the same folder as {target_path}: "
                                "a delta file names its base by file name alone")
    if os.path.basename(base_path) == os.path.basename(target_path):
        raise InvalidInputError(f"{target_path} cannot be its own base")
    source = open_in_folder(os.path.dirname(target_path) or ".", os.path.basename(base_path))
    try:
        # The file the save replaces (links already followed above).
        st = os.lstat(target_path)
    except FileNotFoundError:
        st = None
    if st is not None and (st.st_dev, st.st_ino) == source.identity:
        source.close()
        raise InvalidInputError(f"{target_path} cannot be its own base: {base_path} is the same file")
    view = CheckpointView(source)
    if st is not None and (st.st_dev, st.st_ino) in _chain_files(view):
        view.close()
        raise InvalidInputError(f"{target_path} cannot be a delta against {base_path}: {base_path} is a delta "
                                f"against {target_path} (directly or down its chain), which the save replaces")
    depth = view._file.base.depth if view._file.base is not None else 0
    if depth >= MAX_CHAIN:
        view.close()
        raise InvalidInputError(f"the base {base_path} already has {depth} bases below it: a delta against it "
                                f"would have more than the {MAX_CHAIN} lazystore reads (save it without base=, "
                                "as a keyframe)")
    return view


def _chain_files(view: CheckpointView) -> set[tuple[int, int]]:
    """(device, inode) of each base below ``view``, as far as they are held:
    a file whose base's chain passes through the file it replaces would be
    a cycle (its base decoded through itself)."""
    bases = view._file.base
    if bases is None:
        return set()
    found = set()
    for link in bases.chain.links:
        source = link.view._file.source if link.view is not None else link.source
        identity = getattr(source, "identity", None)
        if identity is not None:
            found.add(identity)
    return found


class DeltaBase:
    """The base a writer codes against: open for the writer's lifetime."""

    def __init__(self, base, target, level: int | None, hash_base=digest):
        self.view = open_beside_target(base, target)
        # What each base chunk's decoded bytes are hashed with: xxh3 (the
        # base checksum), or the writer's task that adds the base digest.
        self.hash_base = hash_base
        identity = self.view._file.index.identity
        # A CheckpointView opens lazystore files only (a foreign base is refused
        # as such), and locate.read_index sets every such index's identity.
        assert identity is not None
        checksum, length = identity
        self.ref = BaseRef(os.path.basename(self.view.name), checksum, length)
        self.codec = ContentDeltaPlanes(level)
        self.used = False  # did any tensor end up delta-coded?

    def plan(self, name: str, spec: DtypeSpec, shape: tuple[int, ...]) -> TensorDelta | None:
        """How to code ``name`` against the base, or None if the base has
        no tensor it can be coded against."""
        try:
            entry = self.view._entry(name)
        except TensorNotFoundError:
            return None
        if entry.dtype != spec.dtype or entry.shape != tuple(shape) or not entry.nbytes:
            return None
        return TensorDelta(self, entry, spec)

    def close(self) -> None:
        self.view.close()


class TensorDelta:
    """One tensor's coding against its base tensor, window by window."""

    def __init__(self, base: DeltaBase, entry, spec: DtypeSpec):
        self.base = base
        self.entry = entry
        self.grid = entry.grid  # the base's: chunk c of the delta is a delta of its chunk c
        self.planes = base.codec.planes_for(spec.dtype.itemsize)
        self.word = word_size(spec.dtype)
        self.is_float = spec.is_float

    def encode(self, window: list, first: int, alone, level_codec) -> tuple[list, list] | None:
        """Stored delta chunks for ``window`` (chunks ``first``, ``first+1``,
        ...) and the hash of each base chunk's decoded bytes (``hash_base``'s
        result: its xxh3, and digest in a file with digests), or None when
        this is the first window and the tensor is better stored alone with
        ``alone`` (the writer's codec)."""
        ids = list(range(first, first + len(window)))
        sizes = [self.entry.decoded[c] for c in ids]
        places = dict(zip(ids, accumulate(sizes[:-1], initial=0)))
        buf = np.empty(sum(sizes), np.uint8)
        file = self.base.view._file
        try:
            # Checked, raw chunks too: a delta coded against damaged bytes
            # could never be read back (its reader checks them).
            file.reader.fill(self.entry, ids, buf, True, places)
        except ChecksumError as exc:
            raise in_base(exc, file.source.name) from None
        bases = [buf[places[c] : places[c] + n] for c, n in zip(ids, sizes)]
        code = partial(self.base.codec.encode_delta, planes=self.planes, word=self.word, is_float=self.is_float)
        # Each chunk's delta, and the checksum of the base bytes it was coded
        # against (the base's identity for a reader), on pool threads.
        hash_base = self.base.hash_base
        coded = run_all(lambda pair: (code(*pair), hash_base(pair[1])),
                        [(np.asarray(chunk).reshape(-1).view(np.uint8), b) for chunk, b in zip(window, bases)])
        encoded = [stored for stored, _ in coded]
        if first == 0 and len(encoded[0]):
            chunk = np.asarray(window[0]).reshape(-1).view(np.uint8)
            standalone = len(chunk) if alone is RAW else len(level_codec(chunk))
            if len(encoded[0]) > (1 - DELTA_MIN_SAVING) * standalone:
                return None
        self.base.used = True
        return encoded, [base_sum for _, base_sum in coded]
