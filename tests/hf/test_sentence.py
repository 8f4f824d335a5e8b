"""sentence-transformers over lazystore weights: a SentenceTransformer saved
by lazystore.hf.save_pretrained and built by lazystore.hf.sentence_transformer
gives embeddings bit-identical to SentenceTransformer on the safetensors
folder (all-MiniLM-L6-v2, the real model)."""

from __future__ import annotations

import json
import os

import pytest
import torch

import lazystore as ls
import lazystore.hf as lh

sentence_transformers = pytest.importorskip("sentence_transformers")

SENTENCES = ["A lazy store reads only what it needs.", "Checkpoints in one file.", "short"]


@pytest.fixture(scope="module")
def reference(minilm_dir):
    model = sentence_transformers.SentenceTransformer(str(minilm_dir), device="cpu")
    return model, model.encode(SENTENCES, convert_to_tensor=True)


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "zstd"])
def test_embeddings_are_bit_identical(reference, tmp_path, compression):
    model, want = reference
    lh.save_pretrained(model, tmp_path, compression=compression)
    names = os.listdir(tmp_path)
    assert "model.lzy" in names and "model.safetensors" not in names and "modules.json" in names
    loaded = lh.sentence_transformer(tmp_path, device="cpu")
    assert isinstance(loaded, sentence_transformers.SentenceTransformer)
    assert torch.equal(loaded.encode(SENTENCES, convert_to_tensor=True), want)


@pytest.mark.slow
def test_saved_again_it_names_sentence_transformers_own_classes(reference, tmp_path):
    lh.save_pretrained(reference[0], tmp_path / "lazy")
    loaded = lh.sentence_transformer(tmp_path / "lazy", device="cpu")
    loaded.save_pretrained(str(tmp_path / "again"))
    types = [m["type"] for m in json.loads((tmp_path / "again" / "modules.json").read_text())]
    assert all(t.startswith("sentence_transformers.") for t in types)
    # ... so sentence-transformers alone loads it (its weights are safetensors again).
    again = sentence_transformers.SentenceTransformer(str(tmp_path / "again"), device="cpu")
    assert torch.equal(again.encode(SENTENCES, convert_to_tensor=True), reference[1])


@pytest.mark.slow
def test_a_folder_of_safetensors_loads_as_sentence_transformers_loads_it(reference, minilm_dir):
    loaded = lh.sentence_transformer(minilm_dir, device="cpu")
    assert torch.equal(loaded.encode(SENTENCES, convert_to_tensor=True), reference[1])


def test_not_a_sentence_transformers_folder(tmp_path):
    with pytest.raises(ls.FormatError, match="modules.json"):
        lh.sentence_transformer(tmp_path)
