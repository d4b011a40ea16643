"""Every pooling in longbert, in two vocabularies, so that a name means the same thing in every strategy.

Token pooling: how the token states of one pass row (a window, a segment) become that unit's vector.
    TOKEN_POOLINGS   cls (the [CLS] state) or mean (the mean of the real tokens' states); `pool_tokens`.

Unit pooling: how a document's unit vectors become the document vector. Pooling happens on embeddings, not on
per-unit logits. Each pooler maps (B, N, H) vectors and a (B, N) mask to a (B, H) vector and, where it has them,
(B, N) weights saying how much each unit counted; `build_pooler` makes any of them.
    UNIT_POOLINGS     mean, max, attention, gated, vote, transformer: for units read independently (chunk, sliding)
    SEGMENT_POOLINGS  last, then the above: for segments read in order with a memory (recurrence, rmt), where
                      the last segment has read the earlier ones
Each strategy's config says which vocabulary it accepts.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from longbert.strategies.base import Pooled, Units
from longbert.strategies.configs import (  # noqa: F401  (the vocabularies, named in configs.py for settings)
    SEGMENT_POOLINGS,
    TOKEN_POOLING_SETTINGS,
    TOKEN_POOLINGS,
    UNIT_POOLINGS,
    UNIT_WEIGHTS,
)


def pool_tokens(hidden: torch.Tensor, attention_mask: torch.Tensor, how: str) -> torch.Tensor:
    """One vector per pass row from its token states, `how` in TOKEN_POOLINGS: (W, L, H), (W, L) -> (W, H)."""
    if how == "cls":
        # A copy, not a view: a view of hidden[:, 0] keeps the whole (W, L, H) pass alive, and a reader that keeps
        # one vector per segment (recurrence, rmt) would hold every segment's states until the document ends (at
        # 1M tokens, about 1.6 GB).
        return hidden[:, 0].clone()
    if how != "mean":  # `auto` is resolved when the model is built (LongDocumentClassifier), never seen here
        raise ValueError(f"token pooling must be one of {TOKEN_POOLINGS}, got {how!r}")
    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (W, L, 1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


class MeanPooler(nn.Module):
    """The mean of the unit vectors, each weighed by the content it adds (`Units.sizes`) when the strategy says so:
    a 1-token tail chunk, or a last window that adds one token to its predecessor, then counts for one token."""

    def forward(self, units: Units) -> Pooled:
        weights = units.mask.to(units.vectors.dtype)  # (B, N)
        if units.sizes is not None:
            weights = weights * units.sizes.to(weights.dtype)
        weights = weights / weights.sum(1, keepdim=True).clamp(min=1.0)
        return Pooled((units.vectors * weights.unsqueeze(-1)).sum(1), weights)  # (B, H)


class MaxPooler(nn.Module):
    def forward(self, units: Units) -> Pooled:
        filled = units.vectors.masked_fill(~units.mask.unsqueeze(-1), float("-inf"))  # (B, N, H)
        vector, winners = filled.max(1)  # (B, H), (B, H)
        # Weight of a unit = share of hidden dimensions where it held the maximum. (A comparison with arange rather
        # than one_hot, whose class count must be a plain int: an exported graph keeps N dynamic.)
        positions = torch.arange(units.vectors.shape[1], device=winners.device)  # (N,)
        weights = (winners.unsqueeze(-1) == positions).to(vector.dtype).mean(1)  # (B, N)
        return Pooled(vector, weights)


class AttentionPooler(nn.Module):
    """Learned weights over units (additive attention, as in hierarchical attention networks)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.project = nn.Linear(hidden_size, hidden_size)
        self.score = nn.Linear(hidden_size, 1, bias=False)

    def weights(self, units: Units) -> torch.Tensor:
        """(B, N) softmax weights over each document's units, 0 on missing ones."""
        scores = self.score(torch.tanh(self.project(units.vectors))).squeeze(-1)  # (B, N)
        return scores.masked_fill(~units.mask, float("-inf")).softmax(-1)

    def forward(self, units: Units) -> Pooled:
        weights = self.weights(units)  # (B, N)
        return Pooled((units.vectors * weights.unsqueeze(-1)).sum(1), weights)


class GatedPooler(nn.Module):
    """Learned gates over units, each in (0, 1) and set by its unit alone (a sigmoid, not a softmax across units),
    then the gate-weighted mean. Attention's softmax lets the highest-scoring unit take nearly all the weight; a gate
    saturates at 1, so every unit that holds evidence counts about equally however many there are, and a document
    decided by several passages (the majority of them, the sum of their evidence) is read from all of them. One gate
    open: that unit's vector, as attention gives; all gates equal (as at the start, bias 0): the plain mean.
    (Multiple-instance learning's attention pooling, Ilse et al. 2018, keeps the softmax; here the gates are
    independent.)"""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.project = nn.Linear(hidden_size, hidden_size)
        self.score = nn.Linear(hidden_size, 1)

    def forward(self, units: Units) -> Pooled:
        gates = torch.sigmoid(self.score(torch.tanh(self.project(units.vectors)))).squeeze(-1)  # (B, N)
        gates = gates * units.mask.to(gates.dtype)
        weights = gates / gates.sum(1, keepdim=True).clamp(min=1e-6)  # (B, N)
        return Pooled((units.vectors * weights.unsqueeze(-1)).sum(1), weights)


class VotePooler(nn.Module):
    """Attention's learned weights over bounded votes: each unit's vector goes through its own projection and a tanh,
    so no unit's contribution to any dimension can exceed 1, and the weighted mean counts units rather than adds up
    their strength. Attention over raw vectors followed by the linear head is a weighted mean of unbounded per-unit
    logits, where one emphatic passage outweighs two mild ones; a document decided by how many passages say what
    (a majority of reviews, a count of findings) needs each passage to count once. The projection starts as the
    identity, so at the start a unit's vote is tanh of its vector: about the vector itself where its entries are
    small, as a backbone's pooled states are, and the pooler then starts close to attention's."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.attention = AttentionPooler(hidden_size)
        self.vote = nn.Linear(hidden_size, hidden_size)
        with torch.no_grad():
            self.vote.weight.copy_(torch.eye(hidden_size))
            self.vote.bias.zero_()

    def votes(self, vectors: torch.Tensor) -> torch.Tensor:
        """(..., H) unit vectors -> (..., H) votes, each entry in (-1, 1)."""
        return torch.tanh(self.vote(vectors))

    def forward(self, units: Units) -> Pooled:
        weights = self.attention.weights(units)  # (B, N): attention's, without the vector it would pool
        return Pooled((self.votes(units.vectors) * weights.unsqueeze(-1)).sum(1), weights)  # (B, H)


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
        return Pooled(MeanPooler()(Units(x, units.mask, units.sizes)).vector, None)


class LastPooler(nn.Module):
    """The last unit's vector: with a memory it was read in the context of the units before it."""

    def forward(self, units: Units) -> Pooled:
        last = units.mask.sum(1) - 1  # (B,)
        vector = units.vectors[torch.arange(units.vectors.shape[0], device=last.device), last]  # (B, H)
        weights = nn.functional.one_hot(last, units.vectors.shape[1]).to(units.vectors.dtype)  # (B, N)
        return Pooled(vector, weights)


def weights_carry_content(pooler: nn.Module) -> bool:
    """Whether `pooler`'s unit weights follow what the units hold (max, attention, gated, last) rather than only how
    many tokens each adds (mean, whose weights are known before the backbone runs). What a pooling strategy's
    `weights_carry_content` hook answers."""
    return not isinstance(pooler, MeanPooler)


def build_pooler(kind: str, hidden_size: int) -> nn.Module:
    """The unit pooler named `kind` (one of SEGMENT_POOLINGS, which holds every name) for `hidden_size` vectors."""
    if kind == "last":
        return LastPooler()
    if kind == "mean":
        return MeanPooler()
    if kind == "max":
        return MaxPooler()
    if kind == "attention":
        return AttentionPooler(hidden_size)
    if kind == "gated":
        return GatedPooler(hidden_size)
    if kind == "vote":
        return VotePooler(hidden_size)
    if kind == "transformer":
        heads = next(h for h in (8, 6, 4, 3, 2, 1) if hidden_size % h == 0)
        return TransformerPooler(hidden_size, heads=heads)
    raise ValueError(f"unknown pooler {kind!r}")
