"""`chunk`: cut the document into consecutive windows, encode each with its own [CLS]/[SEP], pool the chunk
vectors into one document vector (mean, max, learned attention, or a small transformer as in ToBERT)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from longbert.fields import one_of, option
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.pooling import TOKEN_POOLINGS, UNIT_POOLINGS, build_pooler
from longbert.strategies.windows import check_fits, encode_document_windows, split_windows, window_spans


@dataclass
class ChunkConfig:
    name: str = "chunk"
    window: int = option(510, "content tokens per chunk ([CLS]/[SEP] come on top)")
    pooling: str = option("mean", "how chunk vectors become the document vector: mean, max, attention or transformer")
    token_pooling: str = option("cls", "chunk vector: cls ([CLS] state) or mean (mean of token states)")

    def problems(self, path: str) -> list[str]:
        out = []
        if self.window < 1:
            out.append(f"{path}.window must be >= 1, got {self.window}")
        out += one_of(f"{path}.pooling", self.pooling, UNIT_POOLINGS)
        out += one_of(f"{path}.token_pooling", self.token_pooling, TOKEN_POOLINGS)
        return out


@register("chunk", ChunkConfig, "consecutive chunks of the whole document, chunk vectors pooled (mean/max/attention/transformer)")
class ChunkStrategy(nn.Module):
    def __init__(self, config: ChunkConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.window, "strategy.window")

    def windows(self, ids: torch.Tensor) -> list[torch.Tensor]:
        return split_windows(ids, self.config.window, self.config.window)

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        per_document = [self.windows(ids) for ids in documents]
        return encode_document_windows(backbone, per_document, self.special, self.budget, self.config.token_pooling)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return window_spans(length, self.config.window, self.config.window)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
