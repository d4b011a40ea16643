"""`truncate`: keep one window of the document (the baseline every long-document method is measured against).

Sun et al. (2019, "How to Fine-Tune BERT for Text Classification?") found that keeping the first 128 and the
last 382 tokens beat keeping the head or the tail alone on IMDb; all three are here.
"""

from __future__ import annotations

import torch
from torch import nn

from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register, spans_of_indices
from longbert.strategies.configs import TruncateConfig
from longbert.strategies.pooling import pool_tokens
from longbert.strategies.windows import check_fits, encode_cuts


def keep(ids: torch.Tensor, config: TruncateConfig) -> torch.Tensor:
    """The content ids (T,) that survive truncation."""
    if ids.shape[0] <= config.max_tokens:
        return ids
    if config.mode == "head":
        return ids[: config.max_tokens]
    if config.mode == "tail":
        return ids[-config.max_tokens :]
    tail = config.max_tokens - config.head_tokens
    return torch.cat([ids[: config.head_tokens], ids[ids.shape[0] - tail :]])


@register("truncate")
class TruncateStrategy(nn.Module):
    def __init__(self, config: TruncateConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.max_tokens, "strategy.max_tokens")

    def windows(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], None]:
        """One window: the kept tokens."""
        return [keep(ids, self.config)], None

    def window_vectors(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return pool_tokens(hidden, attention_mask, self.config.token_pooling)  # (W, L, H) -> (W, H)

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cuts = [self.windows(ids) for ids in documents]
        return encode_cuts(backbone, cuts, self.special, self.budget, self.config.token_pooling)  # (B, 1, H)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        """One unit: the kept ranges (head and tail)."""
        return [spans_of_indices(keep(torch.arange(length), self.config).tolist())]

    def pool(self, units: Units) -> Pooled:
        return Pooled(units.vectors[:, 0], units.mask.to(units.vectors.dtype))  # (B, H)
