"""Generate tests/data/safetensors/: one small malformed safetensors file per
validation lazystore (and safetensors) performs. Run once; the files are
committed. Each must give lazystore a FormatError.

    python tests/data/make_malformed_safetensors.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

OUT = Path(__file__).resolve().parent / "safetensors"


def header_file(header, data: bytes = b"", *, raw_header: bytes | None = None, length: int | None = None) -> bytes:
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def t(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


DATA8 = bytes(range(8))

CASES = {
    # the header length
    "header_too_large": struct.pack("<Q", 100_000_001) + b"{" + bytes(64),
    "header_length_past_eof": header_file({"a": t()}, DATA8, length=4096),
    # the header text
    "header_not_utf8": header_file(None, DATA8, raw_header=b'{"a\xff": ' + json.dumps(t()).encode() + b"}"),
    "header_not_json": header_file(None, DATA8, raw_header=b'{"a": {"dtype": "F32",'),
    "header_not_object": header_file(None, b"", raw_header=b"{}" [:1] + b"]"),
    "header_nan_constant": header_file(None, DATA8, raw_header=b'{"a": {"dtype": "F32", "shape": [NaN], '
                                                               b'"data_offsets": [0, 8]}}'),
    "duplicate_key": header_file(None, DATA8 * 2, raw_header=b'{"a": ' + json.dumps(t()).encode() + b', "a": '
                                 + json.dumps(t(offsets=(8, 16))).encode() + b"}"),
    # __metadata__
    "metadata_value_not_str": header_file({"__metadata__": {"step": 3}, "a": t()}, DATA8),
    "metadata_not_object": header_file({"__metadata__": ["x"], "a": t()}, DATA8),
    # tensor entries
    "tensor_info_missing_field": header_file({"a": {"dtype": "F32", "shape": [2]}}, DATA8),
    "tensor_info_not_object": header_file({"a": [0, 8]}, DATA8),
    "unknown_dtype": header_file({"a": t(dtype="F128")}, DATA8),
    "shape_negative": header_file({"a": t(shape=(-2,))}, DATA8),
    "shape_not_int": header_file({"a": t(shape=(2.0,))}, DATA8),
    "offsets_not_pair": header_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}}, DATA8),
    "offsets_reversed": header_file({"a": t(offsets=(8, 0))}, DATA8),
    "element_count_overflow": header_file({"a": t(shape=(1 << 32, 1 << 32, 1 << 32), offsets=(0, 8))}, DATA8),
    # no elements, but numpy cannot build the shape: 2**61 float64s would take 2**64 bytes
    "empty_tensor_too_large": header_file({"a": t(dtype="F64", shape=(0, 1 << 61), offsets=(0, 0))}),
    "size_mismatch": header_file({"a": t(shape=(3,), offsets=(0, 8))}, DATA8),
    # the data layout
    "offsets_not_from_zero": header_file({"a": t(offsets=(8, 16))}, DATA8 * 2),
    "gap_between_tensors": header_file({"a": t(), "b": t(offsets=(16, 24))}, DATA8 * 3),
    "overlapping_tensors": header_file({"a": t(shape=(4,), offsets=(0, 16)), "b": t(offsets=(8, 16))}, DATA8 * 2),
    "data_past_eof": header_file({"a": t(shape=(4,), offsets=(0, 16))}, DATA8),
    "trailing_bytes": header_file({"a": t()}, DATA8 + b"junk"),
    # lazystore's own entries
    "lazystore_checksums_not_json": header_file({"__metadata__": {"lazystore.checksums": "{oops"}, "a": t()}, DATA8),
}


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, content in CASES.items():
        (OUT / f"{name}.safetensors").write_bytes(content)
    print(f"wrote {len(CASES)} files to {OUT}")


if __name__ == "__main__":
    main()
