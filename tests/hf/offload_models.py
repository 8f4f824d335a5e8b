"""Small models for the tests of accelerate's big-model inference over
lazystore files (test_offload.py, test_big_model.py): a tiny GPT-2 with
tied input and output embeddings, its reference outputs, and the device
map that puts every block of it on "disk"."""

from __future__ import annotations

import torch
import transformers

# Every top-level module of GPT2LMHeadModel on disk: wte and lm_head are tied,
# so they must share a device (accelerate's rule).
ALL_ON_DISK = {"transformer.wte": "disk", "transformer.wpe": "disk", "transformer.h": "disk",
               "transformer.ln_f": "disk", "lm_head": "disk"}


def gpt2_config(layers: int = 3):
    # bos/eos inside the tiny vocabulary, so transformers does not warn.
    return transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=100, n_positions=32,
                                   bos_token_id=0, eos_token_id=0)


def gpt2(config, *, seed: int = 0):
    """A randomly initialized GPT-2 (the weights' values do not matter to
    offloading, only that they are not the meta model's)."""
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).eval()


def meta_gpt2(config):
    """The model as big-model inference builds it: no memory for weights."""
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = transformers.GPT2LMHeadModel(config).eval()
    model.tie_weights()  # as accelerate's docs ask: on the meta device, transformers leaves ties undone
    return model


def tokens(batch: int = 2, length: int = 8) -> torch.Tensor:
    return torch.randint(0, 100, (batch, length), generator=torch.Generator().manual_seed(1))


def logits(model, ids) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits
