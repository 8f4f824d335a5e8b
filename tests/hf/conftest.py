"""Shared by the tests of lazystore.hf: the real transformers (the folder is
skipped without it), all-MiniLM-L6-v2's folder as Hugging Face ships it
(config, tokenizer, model.safetensors, the sentence-transformers modules),
and that model saved with lazystore weights, raw and compressed."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def minilm_dir(minilm) -> Path:
    """The folder of the real model (beside the model.safetensors ``minilm`` names)."""
    return minilm.parent


@pytest.fixture(scope="session")
def minilm_model(minilm_dir):
    """transformers' own load of the safetensors folder: the reference."""
    return transformers.AutoModel.from_pretrained(minilm_dir)


@pytest.fixture(scope="session")
def lazy_minilm(minilm_model, tmp_path_factory):
    """``{compression: folder}``: MiniLM saved by lazystore.hf.save_pretrained,
    raw (None) and "zstd"."""
    import lazystore.hf as lh

    folders = {}
    for compression in (None, "zstd"):
        folder = tmp_path_factory.mktemp(f"minilm-{compression or 'raw'}")
        lh.save_pretrained(minilm_model, folder, compression=compression)
        folders[compression] = folder
    return folders


@pytest.fixture(scope="session")
def batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (3, 17), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 11:] = 0  # one padded sequence
    return {"input_ids": ids, "attention_mask": mask}

