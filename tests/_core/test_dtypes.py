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
