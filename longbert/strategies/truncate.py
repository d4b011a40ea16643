"""`truncate`: keep one window of the document (the baseline every long-document method is measured against).

Sun et al. (2019, "How to Fine-Tune BERT for Text Classification?") found that keeping the first 128 and the
last 382 tokens beat keeping the head or the tail alone on IMDb; all three are here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register, spans_of_indices
from longbert.strategies.pooling import TOKEN_POOLING_SETTINGS, pool_tokens
from longbert.strategies.windows import check_fits, encode_cuts
from longbert.utils.fields import one_of, option

MODES = ("head", "tail", "head_tail")


@dataclass
class TruncateConfig:
    name: str = "truncate"
    mode: str = option("head_tail", "which tokens to keep: head, tail or head_tail")
    max_tokens: int = option(510, "content tokens kept per document ([CLS]/[SEP] come on top)")
    head_tokens: int = option(128, "with head_tail: tokens from the start; the rest of max_tokens come from the end")
    token_pooling: str = option("auto", "document vector from the window: cls ([CLS] state), mean (token mean), or "
                                        "auto: what the backbone's pooling config says")

    def problems(self, path: str) -> list[str]:
        out = one_of(f"{path}.mode", self.mode, MODES)
        if self.max_tokens < 1:
            out.append(f"{path}.max_tokens must be >= 1, got {self.max_tokens}")
        if self.mode == "head_tail" and not 0 <= self.head_tokens <= self.max_tokens:
            out.append(f"{path}.head_tokens must be between 0 and max_tokens, got {self.head_tokens} > "
                       f"{self.max_tokens}")
        out += one_of(f"{path}.token_pooling", self.token_pooling, TOKEN_POOLING_SETTINGS)
        return out


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


@register("truncate", TruncateConfig, "one window: the head, the tail, or head+tail (Sun et al. 2019) of each document",
          role="reference")
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
