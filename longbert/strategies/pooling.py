"""Poolers that turn a document's unit vectors (chunk or window embeddings) into one document vector.

Pooling happens on embeddings, not on per-chunk logits. Each pooler maps (B, N, H) vectors and a (B, N) mask
to a (B, H) vector and, where it has them, (B, N) weights saying how much each unit counted.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from longbert.strategies.base import Pooled, Units

POOLERS = ("mean", "max", "attention", "transformer")


class MeanPooler(nn.Module):
    def forward(self, units: Units) -> Pooled:
        weights = units.mask.to(units.vectors.dtype)  # (B, N)
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1.0)
        return Pooled((units.vectors * weights.unsqueeze(-1)).sum(1), weights)  # (B, H)


class MaxPooler(nn.Module):
    def forward(self, units: Units) -> Pooled:
        filled = units.vectors.masked_fill(~units.mask.unsqueeze(-1), float("-inf"))  # (B, N, H)
        vector, winners = filled.max(1)  # (B, H), (B, H)
        # Weight of a unit = share of hidden dimensions where it held the maximum.
        weights = nn.functional.one_hot(winners, units.vectors.shape[1]).to(vector.dtype).mean(1)  # (B, N)
        return Pooled(vector, weights)


class AttentionPooler(nn.Module):
    """Learned weights over units (additive attention, as in hierarchical attention networks)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.project = nn.Linear(hidden_size, hidden_size)
        self.score = nn.Linear(hidden_size, 1, bias=False)

    def forward(self, units: Units) -> Pooled:
        scores = self.score(torch.tanh(self.project(units.vectors))).squeeze(-1)  # (B, N)
        scores = scores.masked_fill(~units.mask, float("-inf"))
        weights = scores.softmax(-1)  # (B, N)
        return Pooled((units.vectors * weights.unsqueeze(-1)).sum(1), weights)


class TransformerPooler(nn.Module):
    """A small transformer over unit vectors (ToBERT, Pappagari et al. 2019), then a masked mean.

    Units get sinusoidal positions so the order of chunks is visible; there is no limit on their number."""

    def __init__(self, hidden_size: int, layers: int = 1, heads: int = 4, dropout: float = 0.1):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            hidden_size, heads, dim_feedforward=2 * hidden_size, dropout=dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    @staticmethod
    def positions(n: int, hidden: int, device, dtype) -> torch.Tensor:
        position = torch.arange(n, device=device, dtype=torch.float32).unsqueeze(1)  # (N, 1)
        freq = torch.exp(torch.arange(0, hidden, 2, device=device, dtype=torch.float32) * (-math.log(1e4) / hidden))
        table = torch.zeros(n, hidden, device=device)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq[: hidden // 2])
        return table.to(dtype)  # (N, H)

    def forward(self, units: Units) -> Pooled:
        b, n, h = units.vectors.shape
        x = units.vectors + self.positions(n, h, units.vectors.device, units.vectors.dtype)  # (B, N, H)
        x = self.encoder(x, src_key_padding_mask=~units.mask)  # (B, N, H)
        # Mixed by the transformer, the outputs no longer belong to one chunk each: no per-unit weights.
        return Pooled(MeanPooler()(Units(x, units.mask)).vector, None)


def build_pooler(kind: str, hidden_size: int) -> nn.Module:
    if kind == "mean":
        return MeanPooler()
    if kind == "max":
        return MaxPooler()
    if kind == "attention":
        return AttentionPooler(hidden_size)
    if kind == "transformer":
        heads = next(h for h in (8, 6, 4, 3, 2, 1) if hidden_size % h == 0)
        return TransformerPooler(hidden_size, heads=heads)
    raise ValueError(f"unknown pooler {kind!r}")
