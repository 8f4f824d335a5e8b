"""lazystore.cli.outputs: the output format a destination asks for."""

from __future__ import annotations

from lazystore.cli import outputs


def test_output_format_dispatch(tmp_path):
    assert outputs.output_format("a.lzy") == "lazystore"
    assert outputs.output_format("a") == "lazystore"
    assert outputs.output_format("a.SafeTensors") == "safetensors"
    assert outputs.output_format("a.npz") == "npz"
    assert outputs.output_format("a.pt") == "torch"
    assert outputs.output_format(tmp_path) == "folder"
    assert outputs.output_format("out/") == "folder"
