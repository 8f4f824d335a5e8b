"""A delta file's reference to its base (formats 1.2 and 1.3, docs/format.md §9.3).

A file with delta-coded tensors (codec 2 or 3) names the file they were
coded against in the reserved metadata member ``__lazystore_base__``::

    {"version": 1, "file": "step-000000000100.lzy",
     "index_checksum": "9f0c1d2e3a4b5c6d", "index_length": 18342}

``file`` is a plain file name in the same folder (never a path: a folder of
checkpoints can be moved or copied whole). ``index_checksum`` and
``index_length`` are the base's trailer fields: the base's index covers
every chunk checksum of the base, so a base replaced by another file, or
rewritten, no longer matches, and is refused by name rather than read.
That is the base's identity for codec-2 tensors (format 1.2). Codec-3
tensors (format 1.3) are identified with their base by content instead (each
chunk record holds the xxh3 of the base chunk's decoded bytes: see
:mod:`lazystore.views.base_chain`), so a base rewritten with the same
content stays valid; for them the two fields only say which file the delta
was coded against, and keep the member readable by a 1.2 reader, which then
refuses codec 3 as a newer version's rather than the member as corrupt.
"""

from __future__ import annotations

import json
import re
from typing import NamedTuple

from lazystore._core.file_names import is_plain_file_name
from lazystore._native import layout as fmt
from lazystore.errors import FormatError

BASE_KEY = "__lazystore_base__"
# Most bases below one file that lazystore follows (and so the most it lets
# a writer put below a file): one constant for the reader, ``ls.save(base=)``
# and CheckpointManager's ``delta_depth``. A hostile file could claim any
# chain; a cycle cannot be written (a writer refuses a base whose chain
# passes through the file it replaces).
MAX_CHAIN = 64
BASE_VERSION = 1
DELTA_MINOR = 2  # the format minor version that added codec 2 and this member
CONTENT_DELTA_MINOR = 3  # the one that added codec 3: a base identified by content
_HEX16 = re.compile(r"[0-9a-f]{16}")


class BaseRef(NamedTuple):
    file: str  # plain file name, beside the delta file
    index_checksum: int
    index_length: int

    def to_json(self) -> dict:
        return {"version": BASE_VERSION, "file": self.file, "index_checksum": f"{self.index_checksum:016x}",
                "index_length": self.index_length}


def parse_base_ref(value, where: str) -> BaseRef:
    """The member's value, checked; FormatError naming ``where`` otherwise."""
    def bad(why: str) -> FormatError:
        return FormatError(f"corrupt {BASE_KEY} in {where}: {why}")

    if not isinstance(value, dict):
        raise bad("not a JSON object")
    if value.get("version") != BASE_VERSION or isinstance(value.get("version"), bool):
        raise bad(f"unknown version {value.get('version')!r}")
    name, checksum, length = value.get("file"), value.get("index_checksum"), value.get("index_length")
    # is_plain_file_name refuses non-strings too; the isinstance says so to the type checker.
    if not isinstance(name, str) or not is_plain_file_name(name):
        raise bad(f"{name!r} is not a plain file name in the same folder")
    if not isinstance(checksum, str) or not _HEX16.fullmatch(checksum):
        raise bad("index_checksum is not 16 lowercase hex digits")
    if (not isinstance(length, int) or isinstance(length, bool)
            or not fmt.INDEX_HEADER.size <= length <= fmt.MAX_INDEX_BYTES):
        raise bad(f"index_length {length!r} is not a possible index length")
    return BaseRef(name, int(checksum, 16), length)


# The member as a writer puts it in the metadata: a flat object.
_MEMBER = re.compile(rb'"' + BASE_KEY.encode() + rb'"\s*:\s*(\{[^{}]*\})')


def peek_base_ref(source) -> BaseRef | None:
    """The base a lazystore file names, found cheaply: the trailer, the
    index header and the member in the metadata bytes, nothing parsed or
    checked beyond them (an index read costs several times more). For
    holding a chain of bases when a delta file is opened; the file's
    validated index is what its base is decoded by, and a hostile file
    that says otherwise there costs only the hold. FormatError when the
    file is no lazystore file or the member is corrupt."""
    size = source.size
    trailer = fmt.decode_trailer(source.read(max(0, size - fmt.TRAILER.size), size), size)
    end = trailer.index_offset + trailer.index_length
    header = source.read(trailer.index_offset, trailer.index_offset + fmt.INDEX_HEADER.size)
    metadata_nbytes = fmt.INDEX_HEADER.unpack_from(header)[6]
    if metadata_nbytes > trailer.index_length - fmt.INDEX_HEADER.size:
        raise FormatError("index metadata is longer than the index")
    found = _MEMBER.search(source.read(end - metadata_nbytes, end))
    if found is None:
        return None
    try:
        value = json.loads(found.group(1))
    except ValueError as exc:
        raise FormatError(f"corrupt {BASE_KEY}: {exc}") from None
    return parse_base_ref(value, source.name)
