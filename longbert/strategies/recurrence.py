"""`recurrence`: read a document of any length as consecutive segments, carrying a memory from one segment to the
next as Transformer-XL does (Dai et al. 2019, "Transformer-XL: Attentive Language Models beyond a Fixed-Length
Context"), built on any BERT-family encoder's weights.

Segments. The document is cut into segments of `segment` content tokens; each is read as its own
[CLS] segment [SEP], exactly like a `chunk`, and gives one unit (its [CLS] state, or the mean of its tokens).

Memory. At every layer, the queries of segment t attend to the keys and values of segment t itself **and** of a
memory: that layer's keys and values of the latest `memory` tokens of the previous `memory_segments` segments
([CLS]/[SEP] included, padding never). The memory is kept as keys and values (a KV cache) rather than as hidden
states: the forward pass is the same as Transformer-XL's (its memory states go through the same key/value
projections, and weights do not change within a forward pass), and the projections are not recomputed for every
segment. `memory: 0` is plain independent segments, exactly `chunk` with `window = segment`.

Positions. BERT's positions are absolute and learned, and only enter at the embedding layer. Every segment is
embedded with segment-local positions 0 .. L-1 ([CLS] at 0), the positions the backbone was pretrained on, so the
position table is never exceeded and memory 0 reproduces the plain backbone. Memory entries keep the positions
they were computed with (their own segment-local ones): nothing is re-positioned. So, on its own, a memory key at
local position i-1 looks exactly like the current segment's key at i-1 (measured on MiniLM: in layer 0 the true
previous token got 0.071 of the attention and its memory twin 0.047, and 46-48% of all attention went to memory from
the first step). What tells a query how far back a memory key lies is a relative signal added to attention scores:

- `distance_bias` (the default): a learned bias per layer and head for the true token distance between the query
  and the memory key across the segment boundary, in T5-style buckets (Raffel et al. 2020): distances below
  `DISTANCE_BUCKETS // 2` get a bucket each, longer ones share logarithmically wider buckets up to
  `DISTANCE_MAX` tokens. Keys of the query's own segment get none: they keep the backbone's own positions. It
  starts at `DISTANCE_BIAS_INIT` (-3) for every bucket, so an untrained model gives its memory a small share of
  attention (about e^-3 = 5% of a same-looking key's weight) and reads each segment close to how the pretrained
  backbone reads it alone; training raises the bias where memory helps (as a strategy weight it trains at
  train.head_learning_rate). Cost: the bias depends on the query, so each pass builds an additive attention mask
  of (E, A, L, M + L) per layer instead of a (E, 1, 1, M + L) key mask: with E = 8 segments, A = 12 heads and
  L = M = 512 that is 8 * 12 * 512 * 1024 * 4 bytes = 200 MB in fp32 per layer while that layer runs; it also
  keeps sdpa off its fused kernel for memory passes. Measured (benchmarks/results/recurrence-1m.json, bf16,
  one 1,048,576-token IMDb document): 461 us per token, against 154 for rmt in the same run; recurrence with the
  age bias alone took 159-193 us per token from 2k to 64k tokens (162 at 64k) in an earlier run
  (benchmarks/results/recurrence.json).
- `memory_bias`: a learned bias per layer, per head and per segment age (1 = previous segment, ...,
  `memory_segments`), zero at start; the only signal before distance_bias existed.

Gradients. By default gradients stop at the memory (as in Transformer-XL): each segment is differentiated as if
its memory were a constant. `backprop_segments: k` lets them flow back through the memory across at most k segment
boundaries: the memory is cut every k+1 segments counting back from a document's last segment, so the last segment
always back-propagates into its k predecessors (with `pooling: last`, segments outside that reach are read without
building a graph at all). `null` back-propagates through the whole document. With stopped gradients, the key and
value projections get no gradient from memory positions (Transformer-XL, re-projecting its detached states, would
give them one).

Batches. The segments of all documents run together step by step: step t reads the t-th segment of every
document that has one (documents with fewer segments drop out of later steps), so a document's result does not
depend on its batch. Streaming: without gradients only the memory (at most `memory` tokens per layer) and one
vector per segment are kept, so peak memory does not grow with the document's length.

How it reaches the backbone. `adapt_backbone` installs `recurrence_attention` as the backbone's attention
implementation `longbert_recurrence`, through the installer shared with `bigbird` (strategies/attention.py).
Called with the keyword argument `longbert_recurrence` (a `StepState`, passed through `backbone(...)`) the
backbone's attention reads and writes the memory; called without one it is ordinary sdpa attention.

Shared with `rmt` (strategies/segments.py): cutting into segments, the step-by-step reading loop (`read_segments`)
and the config checks; the segment passes are laid out by `build_pass` (windows.py) and pooled by the poolers of
pooling.py (`last` included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.attention import base_model, install_attention, layer_head_weight
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.configs import DISTANCE_BIAS_INIT, RecurrenceConfig
from longbert.strategies.pooling import build_pooler, pool_tokens, weights_carry_content
from longbert.strategies.segments import read_segments, segment_spans
from longbert.strategies.windows import build_pass, check_fits

ATTENTION_NAME = "longbert_recurrence"
STATE_ARGUMENT = "longbert_recurrence"


# --------------------------------------------------------------------------------------------------------------
# The memory and the attention function that reads and writes it


DISTANCE_BUCKETS = 32  # buckets of the distance bias: 16 exact distances, then 16 logarithmic ones ...
DISTANCE_MAX = 4096  # ... up to this distance in tokens (farther keys share the last bucket)


def distance_bucket(distance: torch.Tensor, buckets: int = DISTANCE_BUCKETS,
                    longest: int = DISTANCE_MAX) -> torch.Tensor:
    """T5-style buckets of token distances >= 1 (memory keys always lie before the query): a distance below
    `buckets // 2` is its own bucket, longer ones share logarithmically wider buckets, and everything from `longest`
    tokens on shares the last. Same shape as `distance`, long."""
    exact = buckets // 2
    far = distance.clamp(min=exact).float()
    wide = exact + (torch.log(far / exact) / math.log(longest / exact) * (buckets - exact)).long()
    return torch.where(distance < exact, distance, wide.clamp(max=buckets - 1))


@dataclass
class LayerMemory:
    """Per layer, the keys and values of the latest tokens of earlier segments, left-padded to M slots."""

    keys: list[torch.Tensor]  # per layer (E, A, M, D)
    values: list[torch.Tensor]  # per layer (E, A, M, D)
    valid: torch.Tensor  # (E, M) bool: slot holds a token
    ages: torch.Tensor  # (E, M) long: 1 = the previous segment, 2 = the one before, ...
    back: torch.Tensor  # (E, M) long: how many tokens before the current segment's first token the key lies (>= 1)

    def rows(self, start: int, stop: int) -> "LayerMemory":
        return LayerMemory([k[start:stop] for k in self.keys], [v[start:stop] for v in self.values],
                           self.valid[start:stop], self.ages[start:stop], self.back[start:stop])

    def cut_gradient(self, cut: torch.Tensor) -> "LayerMemory":
        if bool(cut.all()):
            keys, values = [k.detach() for k in self.keys], [v.detach() for v in self.values]
            return LayerMemory(keys, values, self.valid, self.ages, self.back)
        if not bool(cut.any()):
            return self
        where = cut.to(self.valid.device)[:, None, None, None]  # (E, 1, 1, 1)
        return LayerMemory([torch.where(where, k.detach(), k) for k in self.keys],
                           [torch.where(where, v.detach(), v) for v in self.values], self.valid, self.ages,
                           self.back)

    @staticmethod
    def join(parts: list["LayerMemory"]) -> "LayerMemory":
        """Rows of several passes; slot counts may differ, so shorter ones are left-padded with empty slots."""
        width = max(p.valid.shape[1] for p in parts)

        def pad(x: torch.Tensor, dim: int) -> torch.Tensor:
            shape = list(x.shape)
            shape[dim] = width - x.shape[dim]
            return torch.cat([x.new_zeros(shape), x], dim)

        layers = range(len(parts[0].keys))
        return LayerMemory(
            [torch.cat([pad(p.keys[i], 2) for p in parts]) for i in layers],
            [torch.cat([pad(p.values[i], 2) for p in parts]) for i in layers],
            torch.cat([pad(p.valid, 1) for p in parts]),
            torch.cat([pad(p.ages, 1) for p in parts]),
            torch.cat([pad(p.back, 1) for p in parts]),
        )


class StepState:
    """What the attention function needs for one pass of one step: the memory to read, the current segment's
    padding, and where each key goes in the memory written for the next segment (the same for every layer)."""

    def __init__(self, memory: LayerMemory | None, valid: torch.Tensor, max_tokens: int, max_age: int,
                 bias: torch.Tensor | None, layers: int, distance_bias: torch.Tensor | None = None):
        rows, length = valid.shape  # (E, L)
        if memory is None:
            memory_valid = valid.new_zeros((rows, 0))  # (E, 0)
            memory_ages = torch.zeros((rows, 0), dtype=torch.long, device=valid.device)
            memory_back = memory_ages
        else:
            memory_valid, memory_ages, memory_back = memory.valid, memory.ages, memory.back  # (E, M)
        self.memory, self.bias, self.memory_ages = memory, bias, memory_ages
        self.distance_bias = distance_bias
        # The distance bucket of every (query, memory key) pair: query at pass position i, key `back` tokens before
        # the segment's first token ([CLS] at position 0) lies i + back tokens back. (E, L, M)
        self.buckets = None if distance_bias is None or memory is None else distance_bucket(
            torch.arange(length, device=valid.device)[None, :, None] + memory_back.clamp(min=1)[:, None, :])
        self.key_valid = torch.cat([memory_valid, valid], 1)  # (E, M + L)
        # Ages every key will have for the next segment; the memory keeps the latest `max_tokens` young enough.
        ages = torch.cat([memory_ages + 1, torch.ones_like(valid, dtype=torch.long)], 1)  # (E, M + L)
        # How far before the next segment's first token every key will lie: the current segment's n tokens push the
        # memory back by n; its own key at position p lies n - p back.
        n = valid.sum(1, keepdim=True)  # (E, 1)
        back = torch.cat([memory_back + n, n - torch.arange(length, device=valid.device)[None, :]], 1)  # (E, M + L)
        keep = self.key_valid & (ages <= max_age)  # (E, M + L)
        from_end = keep.flip(1).long().cumsum(1).flip(1)  # (E, M + L): kept keys at or after each position
        width = min(max_tokens, int(keep.sum(1).max()))
        chosen = keep & (from_end <= width)
        slot = torch.where(chosen, width - from_end, width)  # (E, M + L); slot `width` collects the dropped ones
        position = torch.arange(keep.shape[1], device=valid.device).expand(rows, -1)  # (E, M + L)
        self.index = position.new_zeros((rows, width + 1)).scatter_(1, slot, position)[:, :width]  # (E, M')
        next_valid = keep.new_zeros((rows, width + 1)).scatter_(1, slot, chosen)[:, :width]  # (E, M')
        self.next_valid = next_valid
        self.next_ages = torch.gather(ages, 1, self.index) * next_valid  # (E, M')
        self.next_back = torch.gather(back, 1, self.index) * next_valid  # (E, M')
        self.next_keys: list[torch.Tensor | None] = [None] * layers
        self.next_values: list[torch.Tensor | None] = [None] * layers

    def mask(self, layer: int, dtype: torch.dtype, length: int) -> torch.Tensor:
        """Key mask for sdpa: (E, 1, 1, M + L) bool; with an age bias (E, A, 1, M + L) additive; with a distance
        bias (E, A, L, M + L) additive. Keys of the current segment get no bias."""
        memory_slots = self.memory_ages.shape[1]
        if memory_slots == 0 or (self.bias is None and self.buckets is None):
            return self.key_valid[:, None, None, :]
        memory_bias = 0.0
        if self.bias is not None:
            table = self.bias[layer]  # (A, S)
            ages = (self.memory_ages - 1).clamp(0, table.shape[1] - 1)  # (E, M)
            memory_bias = table[:, ages].permute(1, 0, 2)[:, :, None, :]  # (E, A, 1, M)
        if self.buckets is not None:
            memory_bias = memory_bias + self.distance_bias[layer][:, self.buckets].permute(1, 0, 2, 3)  # (E, A, L, M)
        rows, heads = memory_bias.shape[:2]
        current = memory_bias.new_zeros((rows, heads, memory_bias.shape[2], self.key_valid.shape[1] - memory_slots))
        scores = torch.cat([memory_bias, current], 3).to(dtype)  # (E, A, 1 or L, M + L)
        return scores.masked_fill(~self.key_valid[:, None, None, :], torch.finfo(dtype).min)

    def attend(self, module: nn.Module, query, key, value, dropout: float, scaling: float | None) -> torch.Tensor:
        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise LongbertError("strategy recurrence needs attention modules that know their layer (layer_idx)")
        if self.memory is not None:
            key = torch.cat([self.memory.keys[layer].to(key.dtype), key], 2)  # (E, A, M + L, D)
            value = torch.cat([self.memory.values[layer].to(value.dtype), value], 2)  # (E, A, M + L, D)
        gather = self.index[:, None, :, None].expand(-1, key.shape[1], -1, key.shape[3])  # (E, A, M', D)
        self.next_keys[layer] = torch.gather(key, 2, gather)  # (E, A, M', D)
        self.next_values[layer] = torch.gather(value, 2, gather)
        mask = self.mask(layer, query.dtype, query.shape[2])
        output = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout,
                                                scale=scaling)  # (E, A, L, D)
        return output.transpose(1, 2).contiguous()  # (E, L, A, D)

    def next_memory(self) -> LayerMemory:
        if any(k is None for k in self.next_keys):
            raise LongbertError("strategy recurrence: the backbone did not run every layer through its attention")
        return LayerMemory(self.next_keys, self.next_values, self.next_valid, self.next_ages, self.next_back)


def recurrence_attention(module: nn.Module, query, key, value, state: StepState, dropout: float = 0.0,
                         scaling: float | None = None) -> torch.Tensor:
    """Memory attention for one pass of one step: query/key/value (E, A, L, D) -> (E, L, A, D). Installed (see
    `install_attention`) for calls that carry `longbert_recurrence`."""
    return state.attend(module, query, key, value, dropout, scaling)


# --------------------------------------------------------------------------------------------------------------
# The strategy


@register("recurrence")
class RecurrenceStrategy(nn.Module):
    def __init__(self, config: RecurrenceConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)
        self.register_parameter("memory_bias", None)  # (layers, A, S), made by adapt_backbone
        self.register_parameter("distance_bias", None)  # (layers, A, DISTANCE_BUCKETS), made by adapt_backbone

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.segment, "strategy.segment")
        if self.config.memory == 0:
            return
        install_attention(backbone, "recurrence", ATTENTION_NAME, STATE_ARGUMENT, recurrence_attention, per_layer=True)
        if self.config.memory_bias:
            self.memory_bias = layer_head_weight(self.memory_bias, backbone, (self.config.memory_segments,), 0.0)
        if self.config.distance_bias:
            self.distance_bias = layer_head_weight(self.distance_bias, backbone, (DISTANCE_BUCKETS,),
                                                   DISTANCE_BIAS_INIT)

    def read_pass(self, backbone: nn.Module, pieces: list[torch.Tensor], memory: LayerMemory | None):
        """One pass of one step: E segments (content pieces) and the memory carried for them (None at the first
        segment) -> (hidden states (E, L, H), attention_mask (E, L), the memory for the next segment, or None
        with `memory: 0`)."""
        cfg = self.config
        input_ids, attention_mask = build_pass(pieces, self.special, next(backbone.parameters()).device)  # (E, L)
        if cfg.memory == 0:
            return backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, attention_mask, None
        layers = base_model(backbone).config.num_hidden_layers
        state = StepState(memory, attention_mask.bool(), cfg.memory, cfg.memory_segments, self.memory_bias, layers,
                          self.distance_bias)
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                          **{STATE_ARGUMENT: state}).last_hidden_state  # (E, L, H)
        return hidden, attention_mask, state.next_memory()

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cfg = self.config

        def run_pass(pieces: list[torch.Tensor], memory: LayerMemory | None):
            hidden, attention_mask, memory = self.read_pass(backbone, pieces, memory)  # (E, L, H)
            return pool_tokens(hidden, attention_mask, cfg.token_pooling), memory  # (E, H)

        budget = self.budget.on(next(backbone.parameters()).device)
        return read_segments(documents, cfg.segment, budget, cfg.backprop_segments, cfg.pooling == "last", run_pass,
                             cfg.memory)

    def encode_tokens(self, backbone: nn.Module, documents: list[torch.Tensor]) -> list[torch.Tensor]:
        """Token-level reading (continued pretraining): every content token's hidden state, read segment by segment
        with the memory exactly as `encode` reads it; [CLS]/[SEP] left out. One (T, H) tensor per document."""
        cfg = self.config
        width = cfg.segment + 2  # every segment's states padded to one width, so that the steps stack

        def run_pass(pieces: list[torch.Tensor], memory: LayerMemory | None):
            hidden, _, memory = self.read_pass(backbone, pieces, memory)  # (E, L, H)
            return F.pad(hidden, (0, 0, 0, width - hidden.shape[1])), memory  # (E, segment + 2, H)

        budget = self.budget.on(next(backbone.parameters()).device)
        states = read_segments(documents, cfg.segment, budget, cfg.backprop_segments, False, run_pass,
                               cfg.memory).vectors  # (B, N, segment + 2, H), [CLS] at 0
        return [torch.cat([states[b, n, 1 : 1 + end - start] for n, ((start, end),) in
                           enumerate(segment_spans(ids.shape[0], cfg.segment))]) for b, ids in enumerate(documents)]

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return segment_spans(length, self.config.segment)

    def weights_carry_content(self) -> bool:
        return weights_carry_content(self.pooler)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
