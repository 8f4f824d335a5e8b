"""The one table of dtypes the format can store.

Each dtype has a stable one-byte code (written in the index, so codes are
part of the format and never change meaning) and a name (used in messages,
the CLI and docs). bfloat16 and the float8 types come from ml_dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from lazystore.errors import UnsupportedDtypeError


@dataclass(frozen=True)
class DtypeSpec:
    code: int
    name: str
    dtype: np.dtype  # little-endian
    is_float: bool


def _spec(code: int, name: str, dtype, is_float: bool) -> DtypeSpec:
    return DtypeSpec(code, name, np.dtype(dtype).newbyteorder("<"), is_float)


# Codes are written to disk: append new dtypes, never renumber.
DTYPES: tuple[DtypeSpec, ...] = (
    _spec(1, "bool", np.bool_, False),
    _spec(2, "int8", np.int8, False),
    _spec(3, "int16", np.int16, False),
    _spec(4, "int32", np.int32, False),
    _spec(5, "int64", np.int64, False),
    _spec(6, "uint8", np.uint8, False),
    _spec(7, "uint16", np.uint16, False),
    _spec(8, "uint32", np.uint32, False),
    _spec(9, "uint64", np.uint64, False),
    _spec(10, "float16", np.float16, True),
    _spec(11, "float32", np.float32, True),
    _spec(12, "float64", np.float64, True),
    _spec(13, "complex64", np.complex64, True),
    _spec(14, "complex128", np.complex128, True),
    _spec(15, "bfloat16", ml_dtypes.bfloat16, True),
    _spec(16, "float8_e4m3fn", ml_dtypes.float8_e4m3fn, True),
    _spec(17, "float8_e5m2", ml_dtypes.float8_e5m2, True),
)

BY_CODE: dict[int, DtypeSpec] = {d.code: d for d in DTYPES}
BY_NAME: dict[str, DtypeSpec] = {d.name: d for d in DTYPES}
# Keyed by the native-order dtype: np.dtype equality ignores nothing, so a
# big-endian float32 is looked up after normalising its byte order.
_BY_DTYPE: dict[np.dtype, DtypeSpec] = {d.dtype: d for d in DTYPES}

# Vectorised lookups for index validation: code -> itemsize (0 = unknown).
ITEMSIZE_BY_CODE = np.zeros(256, dtype=np.uint64)
for _d in DTYPES:
    ITEMSIZE_BY_CODE[_d.code] = _d.dtype.itemsize


def spec_for(dtype: np.dtype) -> DtypeSpec:
    """The format's spec for a numpy dtype (any byte order)."""
    dtype = np.dtype(dtype)
    key = dtype.newbyteorder("<") if dtype.byteorder in "<>=" else dtype
    spec = _BY_DTYPE.get(key)
    if spec is None:
        supported = ", ".join(d.name for d in DTYPES)
        raise UnsupportedDtypeError(
            f"dtype {dtype} cannot be stored; supported dtypes: {supported}"
        )
    return spec
