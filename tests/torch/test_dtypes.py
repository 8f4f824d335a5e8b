"""Every dtype torch and safetensors store, through lazystore.torch and both
ways between lazystore and the real safetensors library, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import safetensors
import safetensors.torch as st
import torch

import lazystore as ls
from lazystore._core.dtypes import BY_CODE
from lazystore.interop import convert
from lazystore.interop.safetensors import SafetensorsWriter
from lazystore.torch import load_file, safe_open, save_file
from tests.torch.test_files import same


def random_tensor(dtype: torch.dtype, shape=(4, 6), seed: int = 0) -> torch.Tensor:
    """Random bits of ``dtype`` (bool: 0 or 1), made through a same-sized integer."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (int(np.prod(shape)) * dtype.itemsize,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        raw &= 1
    return raw.view(dtype).reshape(shape)


@pytest.mark.parametrize("spec", ls.DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_every_dtype_round_trips_bit_exact(tmp_path, spec, compression):
    dtype = getattr(torch, spec.name)
    ref = {"t": random_tensor(dtype), "scalar": random_tensor(dtype, ()), "empty": random_tensor(dtype, (0, 3))}
    path = tmp_path / "t.lzy"
    save_file(ref, path, compression=compression)
    got = load_file(path)
    assert all(same(got[k], ref[k]) for k in ref)
    with ls.open(path) as ck:  # the numpy side: the table's dtype, the same bytes
        assert ck.format_version == (1, spec.since)
        assert ck["t"].dtype == spec.dtype and ck["t"].tobytes() == ref["t"].view(torch.uint8).numpy().tobytes()
    with safe_open(path, "pt") as f:
        assert f.get_slice("t").get_dtype() == (spec.safetensors or spec.name)
        assert same(f.get_slice("t")[1:3, ::2], ref["t"][1:3, ::2])


@pytest.mark.parametrize("spec", [d for d in ls.DTYPES if d.safetensors], ids=lambda d: d.name)
def test_safetensors_files_read_bit_exact(tmp_path, spec):
    dtype = getattr(torch, spec.name)
    ref = {"t": random_tensor(dtype), "row": random_tensor(dtype, (1, 8))}
    path = tmp_path / "ref.safetensors"
    st.save_file(ref, path)
    got = load_file(path)
    assert all(same(got[k], ref[k]) for k in ref)
    with safetensors.safe_open(path, "pt") as theirs, safe_open(path, "pt") as ours:
        assert ours.get_slice("t").get_dtype() == theirs.get_slice("t").get_dtype() == spec.safetensors
        assert same(ours.get_tensor("t"), theirs.get_tensor("t"))


@pytest.mark.parametrize("spec", [d for d in ls.DTYPES if d.safetensors], ids=lambda d: d.name)
def test_converted_to_safetensors_loads_in_safetensors(tmp_path, spec):
    dtype = getattr(torch, spec.name)
    ref = {"t": random_tensor(dtype)}
    save_file(ref, tmp_path / "t.lzy", compression="zstd")
    convert.to_safetensors(tmp_path / "t.lzy", tmp_path / "t.safetensors")
    got = st.load_file(tmp_path / "t.safetensors")
    assert same(got["t"], ref["t"])


def test_fp4_shapes_count_values_in_safetensors_and_bytes_here(tmp_path):
    packed = random_tensor(torch.float4_e2m1fn_x2, (3, 5))
    st.save_file({"w": packed}, tmp_path / "w.safetensors")
    with safetensors.safe_open(tmp_path / "w.safetensors", "pt") as f:
        assert f.get_slice("w").get_shape() == [3, 10]  # values, two per byte
    with ls.open(tmp_path / "w.safetensors") as ck:
        assert ck.info("w").shape == (3, 5) and ck.info("w").nbytes == 15  # bytes, as torch holds them
    with SafetensorsWriter(tmp_path / "back.safetensors") as w:
        w.add("w", ls.load(tmp_path / "w.safetensors")["w"])
    with safetensors.safe_open(tmp_path / "back.safetensors", "pt") as f:
        assert f.get_slice("w").get_shape() == [3, 10] and same(f.get_tensor("w"), packed)


def test_fp4_shapes_torch_cannot_hold_are_refused(tmp_path):
    # A safetensors F4 tensor whose last dim is odd: valid bytes, but no whole
    # float4_e2m1fn_x2 elements (torch refuses it too).
    header = b'{"w":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]}}'
    header += b" " * (-len(header) % 8)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + b"\x21\x43\x65")
    with pytest.raises(ls.FormatError, match=r"F4 shape \[2, 3\] cannot be read as float4_e2m1fn_x2"):
        ls.open(path)
    with pytest.raises(ls.UnsupportedDtypeError, match="0-d float4_e2m1fn_x2"), \
            SafetensorsWriter(tmp_path / "s.safetensors") as w:
        w.add("s", np.array(0x21, np.uint8).view(BY_CODE[21].dtype))
    assert not (tmp_path / "s.safetensors").exists()


def test_safetensors_cannot_hold_complex32_or_complex128(tmp_path):
    save_file({"c": torch.ones(2, dtype=torch.complex32)}, tmp_path / "c.lzy")
    with pytest.raises(ls.UnsupportedDtypeError, match="safetensors cannot store complex32"):
        convert.to_safetensors(tmp_path / "c.lzy", tmp_path / "c.safetensors")


def test_mxfp4_style_checkpoint(tmp_path):
    # MXFP4 as checkpoints hold it: FP4 blocks of 32 values (16 bytes) and one E8M0 scale per block.
    blocks = random_tensor(torch.float4_e2m1fn_x2, (8, 4, 16))
    scales = torch.full((8, 4), 2.0 ** -3).to(torch.float8_e8m0fnu)
    save_file({"w.blocks": blocks, "w.scales": scales}, tmp_path / "mx.lzy", compression="zstd")
    got = load_file(tmp_path / "mx.lzy")
    assert same(got["w.blocks"], blocks) and same(got["w.scales"], scales)
    assert got["w.scales"].float().unique().tolist() == [0.125]


def test_docs_dtype_table_is_the_table():
    from tests.paths import REPO

    text = (REPO / "docs" / "torch.md").read_text(encoding="utf-8")
    section = text.split("## Dtypes")[1].split("\n## ")[0]
    for spec in ls.DTYPES:
        row = next(line for line in section.splitlines() if f"`{spec.name}`" in line)
        assert spec.safetensors is None or f"`{spec.safetensors}`" in row, spec.name
        assert row.rstrip(" |").endswith(f"1.{spec.since}"), spec.name
