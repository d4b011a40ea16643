"""`sliding`: overlapping windows (width `window`, a new one every `stride` tokens), each encoded with its own
[CLS]/[SEP], the window vectors pooled into one document vector (mean, max, learned attention, or a small transformer
as in ToBERT).

Overlap gives every token some context on both sides, at the cost of window/stride times the backbone work of
`chunk`. `chunk` is this module with stride == window (chunk.py holds its config and registers this class), so the
two can never drift apart."""

from __future__ import annotations

import torch
from torch import nn

from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.configs import SlidingConfig
from longbert.strategies.pooling import build_pooler, pool_tokens, weights_carry_content
from longbert.strategies.windows import check_fits, cut_windows, encode_cuts, window_spans


@register("sliding")
class SlidingStrategy(nn.Module):
    """Windows of `config.window` tokens every `config.stride` tokens. Serves `chunk` too, whose config's stride is
    its window."""

    def __init__(self, config: SlidingConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.window, "strategy.window")

    def windows(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[float] | None]:
        return cut_windows(ids, self.config.window, self.config.stride, self.config.unit_weights)

    def window_vectors(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return pool_tokens(hidden, attention_mask, self.config.token_pooling)  # (W, L, H) -> (W, H)

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cuts = [self.windows(ids) for ids in documents]
        return encode_cuts(backbone, cuts, self.special, self.budget, self.config.token_pooling)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return window_spans(length, self.config.window, self.config.stride)

    def weights_carry_content(self) -> bool:
        return weights_carry_content(self.pooler)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
