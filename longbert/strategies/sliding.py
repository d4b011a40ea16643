"""`sliding`: overlapping windows (width `window`, a new one every `stride` tokens), each encoded with its own
[CLS]/[SEP], the window vectors pooled into one document vector (mean, max, learned attention, or a small transformer
as in ToBERT).

Overlap gives every token some context on both sides, at the cost of window/stride times the backbone work of
`chunk`. `chunk` is this module with stride == window (chunk.py holds its config and registers this class), so the
two can never drift apart."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.pooling import (
    TOKEN_POOLING_SETTINGS,
    UNIT_POOLINGS,
    UNIT_WEIGHTS,
    build_pooler,
    pool_tokens,
    weights_carry_content,
)
from longbert.strategies.windows import check_fits, cut_windows, encode_cuts, window_spans
from longbert.utils.fields import one_of, option


def pooling_problems(config, path: str) -> list[str]:
    """What is wrong with the pooling settings a window strategy's config shares (chunk's and sliding's)."""
    return (one_of(f"{path}.pooling", config.pooling, UNIT_POOLINGS)
            + one_of(f"{path}.token_pooling", config.token_pooling, TOKEN_POOLING_SETTINGS)
            + one_of(f"{path}.unit_weights", config.unit_weights, UNIT_WEIGHTS))


@dataclass
class SlidingConfig:
    name: str = "sliding"
    window: int = option(510, "content tokens per window ([CLS]/[SEP] come on top)")
    stride: int = option(255, "tokens between the starts of consecutive windows (window - stride = overlap)")
    pooling: str = option("attention", "how window vectors become the document vector: mean, max, attention, "
                                       "gated, vote or transformer")
    token_pooling: str = option("auto", "window vector: cls ([CLS] state), mean (mean of token states), or auto: "
                                        "what the backbone's own pooling config says (mean for sentence-transformers "
                                        "models that mean-pool, cls otherwise)")
    unit_weights: str = option("new_tokens", "how mean pooling weighs the windows: new_tokens (by the tokens each "
                                             "adds to those before it, so a short tail counts little) or equal")

    # What a key missing from a model saved before the key existed means (see ModelSettings.from_dict).
    ABSENT_MEANS = {"unit_weights": "equal"}

    def problems(self, path: str) -> list[str]:
        out = []
        if self.window < 1:
            out.append(f"{path}.window must be >= 1, got {self.window}")
        if self.stride < 1:
            out.append(f"{path}.stride must be >= 1, got {self.stride}")
        elif self.stride > self.window:
            out.append(f"{path}.stride must be <= {path}.window, got {self.stride} > {self.window}")
        return out + pooling_problems(self, path)


@register("sliding", SlidingConfig, "overlapping windows (window, stride) over the whole document, pooled like chunk")
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
