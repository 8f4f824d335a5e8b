"""The one dtype table agrees with numpy, torch and the safetensors library."""

from __future__ import annotations

import numpy as np
import pytest

import lazystore as ls
from lazystore._core import dtypes


def test_codes_and_names_are_unique():
    assert len({d.code for d in ls.DTYPES}) == len(ls.DTYPES)
    assert len({d.name for d in ls.DTYPES}) == len(ls.DTYPES)
    assert len(dtypes.BY_SAFETENSORS) == sum(d.safetensors is not None for d in ls.DTYPES)


@pytest.mark.parametrize("spec", ls.DTYPES, ids=lambda d: d.name)
def test_every_dtype_is_found_in_any_byte_order(spec):
    assert dtypes.spec_for(spec.dtype) is spec
    if spec.dtype.itemsize > 1 and spec.dtype.kind in "iufc":
        assert dtypes.spec_for(spec.dtype.newbyteorder(">")) is spec
    assert dtypes.dtype_name(spec.dtype) == spec.name


def test_unknown_dtypes_are_refused_with_the_supported_list():
    assert dtypes.lookup(np.dtype("U3")) is None
    assert dtypes.dtype_name(np.dtype("U3")) == "<U3"
    with pytest.raises(ls.UnsupportedDtypeError, match="supported dtypes: bool, int8"):
        dtypes.spec_for(np.dtype(object))


@pytest.mark.parametrize("spec", ls.DTYPES, ids=lambda d: d.name)
def test_torch_spellings(spec):
    torch = pytest.importorskip("torch")
    tdtype = getattr(torch, spec.name)
    assert tdtype.itemsize == spec.dtype.itemsize
    if spec.torch_via is None:  # torch and numpy exchange it directly
        assert torch.from_numpy(np.zeros(1, spec.dtype)).dtype == tdtype
    else:
        assert getattr(torch, spec.torch_via).itemsize == spec.dtype.itemsize


@pytest.mark.parametrize("spec", [d for d in ls.DTYPES if d.safetensors], ids=lambda d: d.name)
def test_safetensors_spellings_are_the_libraries_own(tmp_path, spec):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    path = tmp_path / "t.safetensors"
    save_file({"t": torch.zeros(2, dtype=getattr(torch, spec.name))}, path)
    with ls.open(path) as ck:
        assert ck["t"].dtype == spec.dtype
    header = path.read_bytes()
    assert f'"dtype":"{spec.safetensors}"'.encode() in header


def test_every_code_says_which_format_version_added_it():
    from lazystore._native.layout import DTYPE_MINOR

    assert {d.code: d.since for d in ls.DTYPES} == {**dict.fromkeys(range(1, 18), 0), **dict.fromkeys(range(18, 23), 1)}
    assert max(d.since for d in ls.DTYPES) == DTYPE_MINOR  # the newest minor that added dtype codes


def test_only_fp4_packs_two_values_per_element():
    assert {d.name: d.packed for d in ls.DTYPES if d.packed != 1} == {"float4_e2m1fn_x2": 2}
    fp4 = dtypes.BY_SAFETENSORS["F4"]
    assert fp4.dtype == dtypes.FLOAT4_X2 and fp4.dtype.itemsize == 1 and fp4.dtype != np.uint8
    assert dtypes.spec_for(np.dtype([("float4_e2m1fn_x2", "u1")])) is fp4


def test_safetensors_shapes_of_packed_dtypes():
    fp4, f32 = dtypes.BY_SAFETENSORS["F4"], dtypes.BY_SAFETENSORS["F32"]
    assert dtypes.to_safetensors_shape(fp4, (3, 5)) == (3, 10)
    assert dtypes.from_safetensors_shape(fp4, [3, 10]) == (3, 5)
    assert dtypes.from_safetensors_shape(fp4, [3, 0]) == (3, 0)
    assert dtypes.from_safetensors_shape(fp4, [3, 9]) is None and dtypes.from_safetensors_shape(fp4, []) is None
    with pytest.raises(ls.UnsupportedDtypeError, match="0-d"):
        dtypes.to_safetensors_shape(fp4, ())
    assert dtypes.to_safetensors_shape(f32, ()) == () and dtypes.from_safetensors_shape(f32, [3, 9]) == (3, 9)
