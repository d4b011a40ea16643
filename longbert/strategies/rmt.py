"""`rmt`: the Recurrent Memory Transformer (Bulatov et al. 2022, "Recurrent Memory Transformer"; with BERT-base up
to millions of tokens in Bulatov et al. 2023): a simpler way to carry state across segments than `recurrence`.

A few memory tokens travel with the document. Each segment is read as

    [CLS] m_1 .. m_k  segment  [SEP]        positions 0, 1 .. k, k+1 .., segment-local as in `recurrence`

where the k memory embeddings are, for the first segment, learned vectors, and for every later segment the
backbone's output states at the memory positions of the segment before (in an encoder the same tokens are read and
written, as in RMT's encoder variant). They enter like word embeddings: the backbone adds its position and
token-type embeddings and normalises them. Nothing in the backbone changes; the memory is the only state, so it
costs k positions of each segment and nothing else, and at inference peak memory does not depend on the length.

Gradients flow back through the memory across the whole document by default (`backprop_segments: null`, as RMT
trains); `backprop_segments: k` cuts them as `recurrence` does (every k+1 segments counting back from the last).
The document vector comes by default from the last segment, which has read the whole document through the memory.
`memory_tokens: 0` is plain independent segments, exactly `chunk` with `window = segment`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.attention import base_model
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.configs import RmtConfig
from longbert.strategies.pooling import build_pooler, pool_tokens, weights_carry_content
from longbert.strategies.segments import read_segments, segment_spans
from longbert.strategies.windows import build_pass, check_fits


@dataclass
class TokenMemory:
    """The memory tokens' states, carried to the next segment."""

    states: torch.Tensor  # (E, M, H)

    def rows(self, start: int, stop: int) -> "TokenMemory":
        return TokenMemory(self.states[start:stop])

    def cut_gradient(self, cut: torch.Tensor) -> "TokenMemory":
        if bool(cut.all()):
            return TokenMemory(self.states.detach())
        if not bool(cut.any()):
            return self
        return TokenMemory(torch.where(cut.to(self.states.device)[:, None, None], self.states.detach(), self.states))

    @staticmethod
    def join(parts: list["TokenMemory"]) -> "TokenMemory":
        return TokenMemory(torch.cat([p.states for p in parts]))


def check_takes_memory_tokens(backbone: nn.Module) -> None:
    """The memory goes in as input embeddings and comes back as output states: the backbone must take
    `inputs_embeds`, and its input embeddings must have the size of its hidden states (not so in ALBERT, nor in
    ELECTRA-small, whose smaller embeddings are projected up)."""
    model = base_model(backbone)
    kind = type(model).__name__
    if "inputs_embeds" not in inspect.signature(model.forward).parameters:
        raise LongbertError(f"strategy rmt prepends memory tokens as input embeddings; {kind} takes no inputs_embeds")
    embedding_size, hidden_size = model.get_input_embeddings().embedding_dim, model.config.hidden_size
    if embedding_size != hidden_size:
        raise LongbertError(f"strategy rmt feeds the memory tokens' output states (size {hidden_size}) back in as "
                            f"input embeddings, but {kind}'s input embeddings have size {embedding_size}")


@register("rmt")
class RmtStrategy(nn.Module):
    def __init__(self, config: RmtConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)
        # The first segment's memory; BERT's initializer range. (M, H)
        self.memory = (nn.Parameter(torch.randn(config.memory_tokens, hidden_size) * 0.02) if config.memory_tokens
                       else None)

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.segment + self.config.memory_tokens,
                   "strategy.segment + strategy.memory_tokens")
        if self.config.memory_tokens:
            check_takes_memory_tokens(backbone)

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cfg = self.config
        device = next(backbone.parameters()).device
        k = cfg.memory_tokens

        def run_pass(pieces: list[torch.Tensor], memory: TokenMemory | None):
            input_ids, attention_mask = build_pass(pieces, self.special, device)  # (E, L), (E, L)
            if k == 0:
                hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (E, L, H)
                return pool_tokens(hidden, attention_mask, cfg.token_pooling), None
            rows = input_ids.shape[0]
            tokens = backbone.get_input_embeddings()(input_ids)  # (E, L, H)
            read = self.memory.expand(rows, -1, -1) if memory is None else memory.states  # (E, M, H)
            embeds = torch.cat([tokens[:, :1], read.to(tokens.dtype), tokens[:, 1:]], 1)  # (E, M + L, H)
            ones = attention_mask.new_ones((rows, k))
            mask = torch.cat([attention_mask[:, :1], ones, attention_mask[:, 1:]], 1)  # (E, M + L)
            hidden = backbone(inputs_embeds=embeds, attention_mask=mask).last_hidden_state  # (E, M + L, H)
            written = hidden[:, 1 : 1 + k].clone()  # (E, M, H); a copy, so the pass's hidden states can go
            own = torch.cat([hidden[:, :1], hidden[:, 1 + k :]], 1)  # (E, L, H): the segment without its memory
            return pool_tokens(own, attention_mask, cfg.token_pooling), TokenMemory(written)

        return read_segments(documents, cfg.segment, self.budget.on(device), cfg.backprop_segments,
                             cfg.pooling == "last", run_pass, k)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return segment_spans(length, self.config.segment)

    def weights_carry_content(self) -> bool:
        return weights_carry_content(self.pooler)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
