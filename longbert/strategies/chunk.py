"""`chunk`: cut the document into consecutive windows, encode each with its own [CLS]/[SEP], pool the chunk
vectors into one document vector (mean, max, learned attention, or a small transformer as in ToBERT)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from longbert.config.fields import one_of, option
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.pooling import TOKEN_POOLING_SETTINGS, UNIT_POOLINGS, UNIT_WEIGHTS, build_pooler
from longbert.strategies.windows import check_fits, cut_windows, encode_cuts, window_spans


@dataclass
class ChunkConfig:
    name: str = "chunk"
    window: int = option(510, "content tokens per chunk ([CLS]/[SEP] come on top)")
    pooling: str = option("mean", "how chunk vectors become the document vector: mean, max, attention or transformer")
    token_pooling: str = option("auto", "chunk vector: cls ([CLS] state), mean (mean of token states), or auto: what the backbone's own pooling config says (mean for sentence-transformers models that mean-pool, cls otherwise)")
    unit_weights: str = option("new_tokens", "how mean pooling weighs the chunks: new_tokens (by the tokens each adds to those before it, so a short tail counts little) or equal")

    # What a key missing from a model saved before the key existed means (see model.ModelSettings.from_dict).
    ABSENT_MEANS = {"unit_weights": "equal"}

    def problems(self, path: str) -> list[str]:
        out = []
        if self.window < 1:
            out.append(f"{path}.window must be >= 1, got {self.window}")
        out += one_of(f"{path}.pooling", self.pooling, UNIT_POOLINGS)
        out += one_of(f"{path}.token_pooling", self.token_pooling, TOKEN_POOLING_SETTINGS)
        out += one_of(f"{path}.unit_weights", self.unit_weights, UNIT_WEIGHTS)
        return out


@register("chunk", ChunkConfig, "consecutive chunks of the whole document, chunk vectors pooled (mean/max/attention/transformer)",
          role="default")
class ChunkStrategy(nn.Module):
    def __init__(self, config: ChunkConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.window, "strategy.window")

    def windows(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[float] | None]:
        return cut_windows(ids, self.config.window, self.config.window, self.config.unit_weights)

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cuts = [self.windows(ids) for ids in documents]
        return encode_cuts(backbone, cuts, self.special, self.budget, self.config.token_pooling)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return window_spans(length, self.config.window, self.config.window)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
