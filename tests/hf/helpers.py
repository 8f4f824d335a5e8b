"""What the tests of lazystore.hf compare and build."""

from __future__ import annotations

import torch
import transformers


def outputs(model, batch) -> tuple:
    with torch.no_grad():
        out = model(**batch)
    return out.last_hidden_state, out.pooler_output


def bit_identical(got, want) -> bool:
    return all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def tiny_tied_llama():
    """A tiny Llama whose output layer is its input embedding (random weights)."""
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()
