"""The one table of dtypes: every spelling of every dtype lazystore stores.

Each row gives a dtype's one-byte code (written in the index, so codes are
part of the format and never change meaning), lazystore's name for it (used
in messages, the CLI and docs), its numpy dtype, safetensors' name ("BF16"),
and torch's name with how to reinterpret it where torch and numpy cannot
exchange it directly, and the format minor version that introduced its code.
Every other layer derives its lookups from this table: adding a dtype is one
row here (and, being a new code, a format minor version: docs/format.md §14).

bfloat16, the float8 types and complex32 come from ml_dtypes; torch has no
numpy dtype for them, so their tensors cross over through a same-sized
integer view (``t.view(torch.int16).numpy().view(bfloat16)``).

float4_e2m1fn_x2 is torch's FP4: two 4-bit values packed in one byte. Neither
numpy nor ml_dtypes has that type (ml_dtypes.float4_e2m1fn spends a byte per
value), so numpy sees it as a one-byte structured dtype whose only field,
``float4_e2m1fn_x2``, is the packed byte: it round-trips bit for bit, and
``arr.view(np.uint8)`` gives the bytes. safetensors counts its 4-bit values
("F4", last dim twice torch's); ``packed`` says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from lazystore.errors import UnsupportedDtypeError


@dataclass(frozen=True)
class DtypeSpec:
    code: int  # the format's dtype code (docs/format.md, "Dtypes")
    name: str  # lazystore's name, also torch's (torch.<name>) where torch has the dtype
    dtype: np.dtype  # little-endian
    is_float: bool
    safetensors: str | None  # safetensors' dtype string, None where it has none
    torch_via: str | None  # torch integer dtype to reinterpret through, None where from_numpy works
    since: int = 0  # the format minor version that introduced the code: a file using it is at least 1.<since>
    packed: int = 1  # values per element: 2 where one element (a byte) holds two 4-bit values


def _row(code: int, name: str, dtype, is_float: bool, safetensors: str | None,
         torch_via: str | None = None, *, since: int = 0, packed: int = 1) -> DtypeSpec:
    return DtypeSpec(code, name, np.dtype(dtype).newbyteorder("<"), is_float, safetensors, torch_via,
                     since, packed)


# numpy's stand-in for torch.float4_e2m1fn_x2: one byte, named for the type
# so it can neither be mistaken for uint8 nor collide with it in the lookup.
FLOAT4_X2 = np.dtype([("float4_e2m1fn_x2", "u1")])


# Codes are written to disk: append new dtypes, never renumber.
DTYPES: tuple[DtypeSpec, ...] = (
    _row(1, "bool", np.bool_, False, "BOOL"),
    _row(2, "int8", np.int8, False, "I8"),
    _row(3, "int16", np.int16, False, "I16"),
    _row(4, "int32", np.int32, False, "I32"),
    _row(5, "int64", np.int64, False, "I64"),
    _row(6, "uint8", np.uint8, False, "U8"),
    _row(7, "uint16", np.uint16, False, "U16"),
    _row(8, "uint32", np.uint32, False, "U32"),
    _row(9, "uint64", np.uint64, False, "U64"),
    _row(10, "float16", np.float16, True, "F16"),
    _row(11, "float32", np.float32, True, "F32"),
    _row(12, "float64", np.float64, True, "F64"),
    _row(13, "complex64", np.complex64, True, "C64"),
    _row(14, "complex128", np.complex128, True, None),
    _row(15, "bfloat16", ml_dtypes.bfloat16, True, "BF16", torch_via="int16"),
    _row(16, "float8_e4m3fn", ml_dtypes.float8_e4m3fn, True, "F8_E4M3", torch_via="uint8"),
    _row(17, "float8_e5m2", ml_dtypes.float8_e5m2, True, "F8_E5M2", torch_via="uint8"),
    # Format 1.1 (docs/format.md §8 gives each one's bits).
    _row(18, "float8_e4m3fnuz", ml_dtypes.float8_e4m3fnuz, True, "F8_E4M3FNUZ", torch_via="uint8", since=1),
    _row(19, "float8_e5m2fnuz", ml_dtypes.float8_e5m2fnuz, True, "F8_E5M2FNUZ", torch_via="uint8", since=1),
    _row(20, "float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, True, "F8_E8M0", torch_via="uint8", since=1),
    # is_float False: numpy sees packed bytes, not floats it could compute with.
    _row(21, "float4_e2m1fn_x2", FLOAT4_X2, False, "F4", torch_via="uint8", since=1, packed=2),
    _row(22, "complex32", ml_dtypes.complex32, True, None, torch_via="int32", since=1),
)

BY_CODE: dict[int, DtypeSpec] = {d.code: d for d in DTYPES}
# Every dtype of the table is also a torch dtype of the same name.
BY_TORCH_NAME: dict[str, DtypeSpec] = {d.name: d for d in DTYPES}
BY_SAFETENSORS: dict[str, DtypeSpec] = {d.safetensors: d for d in DTYPES if d.safetensors}
# Keyed by the little-endian dtype: np.dtype equality ignores nothing, so a
# big-endian float32 is looked up after normalising its byte order.
_BY_DTYPE: dict[np.dtype, DtypeSpec] = {d.dtype: d for d in DTYPES}


def lookup(dtype) -> DtypeSpec | None:
    """The table's row for a numpy dtype (any byte order), or None."""
    dtype = np.dtype(dtype)
    return _BY_DTYPE.get(dtype.newbyteorder("<") if dtype.byteorder in "<>=" else dtype)


def spec_for(dtype) -> DtypeSpec:
    """The table's row for a numpy dtype (any byte order); a dtype the format
    cannot store raises UnsupportedDtypeError listing those it can."""
    spec = lookup(dtype)
    if spec is None:
        supported = ", ".join(d.name for d in DTYPES)
        raise UnsupportedDtypeError(f"dtype {np.dtype(dtype)} cannot be stored; supported dtypes: {supported}")
    return spec


def dtype_name(dtype) -> str:
    """lazystore's name of a numpy dtype ("float32", "bfloat16", ...), or
    numpy's for a dtype outside the table."""
    spec = lookup(dtype)
    return spec.name if spec is not None else str(np.dtype(dtype))


def to_safetensors_shape(spec: DtypeSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape safetensors records for a tensor of ``spec`` and ``shape``:
    the same, but for packed dtypes, whose last dim safetensors counts in
    values (F4: twice the bytes). A 0-d packed tensor has no last dim to
    count along, so safetensors cannot hold it."""
    if spec.packed == 1:
        return tuple(shape)
    if not shape:
        raise UnsupportedDtypeError(f"safetensors cannot store a 0-d {spec.name} tensor: it counts "
                                    f"{spec.safetensors} values along the last dimension")
    return (*shape[:-1], shape[-1] * spec.packed)


def from_safetensors_shape(spec: DtypeSpec, shape: Sequence[int]) -> tuple[int, ...] | None:
    """lazystore's shape for a safetensors header's ``shape`` of ``spec``,
    or None where a packed dtype's last dim does not split into whole
    elements (torch cannot hold such a tensor either)."""
    if spec.packed == 1:
        return tuple(shape)
    if not shape or shape[-1] % spec.packed:
        return None
    return (*shape[:-1], shape[-1] // spec.packed)
