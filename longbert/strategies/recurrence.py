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
they were computed with (their own segment-local ones): nothing is re-positioned. What tells a query how far back
a memory key lies is a relative signal added to attention: with `memory_bias`, a learned bias per layer, per head
and per segment age (1 = previous segment, ..., `memory_segments`) is added to the scores of memory keys. It
starts at zero, so an untrained model reads memory exactly as it reads its own segment.

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

How it reaches the backbone. `adapt_backbone` switches the backbone's attention implementation to
`longbert_recurrence`, a function registered with transformers' AttentionInterface. Called with the keyword
argument `longbert_recurrence` (a `StepState`, passed through `backbone(...)`) it reads and writes the memory;
called without one it is ordinary sdpa attention.

The helpers `read_segments` and `wrap_segments` are shared with `rmt`; poolers (`last` included) are in pooling.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from longbert.errors import LongbertError
from longbert.fields import one_of, option
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.pooling import SEGMENT_POOLINGS, TOKEN_POOLINGS, build_pooler, pool_tokens
from longbert.strategies.windows import check_fits

ATTENTION_NAME = "longbert_recurrence"
STATE_ARGUMENT = "longbert_recurrence"


# --------------------------------------------------------------------------------------------------------------
# Helpers shared with `rmt`: segments, the step-by-step reading loop


def segment_spans(length: int, segment: int) -> list[list[tuple[int, int]]]:
    """Each segment's token range for a document of `length` tokens (one range a unit)."""
    return [[(t * segment, min(length, (t + 1) * segment))] for t in range(max(1, -(-length // segment)))]


def count_segments(documents: list[torch.Tensor], segment: int) -> list[int]:
    """Segments per document; an empty document is one empty segment."""
    return [max(1, -(-d.shape[0] // segment)) for d in documents]


def wrap_segments(pieces: list[torch.Tensor], special: SpecialTokens, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Content pieces -> [CLS] piece [SEP], right-padded to the longest: input_ids (E, L), attention_mask (E, L)."""
    width = max(p.shape[0] for p in pieces) + 2
    input_ids = torch.full((len(pieces), width), special.pad_id, dtype=torch.long, device=device)  # (E, L)
    attention_mask = torch.zeros((len(pieces), width), dtype=torch.long, device=device)  # (E, L)
    for row, piece in enumerate(pieces):
        n = piece.shape[0] + 2
        input_ids[row, 0] = special.cls_id
        input_ids[row, 1 : n - 1] = piece.to(device)
        input_ids[row, n - 1] = special.sep_id
        attention_mask[row, :n] = 1
    return input_ids, attention_mask


def read_segments(
    documents: list[torch.Tensor],
    segment: int,
    budget: PassBudget,
    backprop_segments: int | None,
    last_only: bool,
    run_pass: Callable,
    carried_tokens: int,
    device,
) -> Units:
    """Read every document segment by segment, all documents of the batch together, carrying a memory.

    `run_pass(pieces, memory)` reads one segment of each of E documents (content pieces, the memory carried
    for those rows or None at the first segment) and returns (E, H) segment vectors and the memory to carry on.
    A memory object has `rows(start, stop)`, `cut_gradient(cut)` (detach the rows where the (E,) bool `cut` is
    True) and a static `join(parts)` (the rows of several passes, in order). `carried_tokens`: tokens each row
    carries besides its segment (for the pass budget). Returns Units (B, N, H), one unit per segment."""
    counts = count_segments(documents, segment)
    # Longest documents first: the documents still being read at step t are always the first E rows.
    order = sorted(range(len(documents)), key=lambda b: -counts[b])
    remaining = torch.tensor([counts[b] for b in order])  # (B,) segments per document, in reading order
    memory = None
    steps: list[torch.Tensor] = []
    for t in range(max(counts)):
        rows = int((remaining > t).sum())
        after = remaining[:rows] - 1 - t  # (E,) segments still to come after this one
        if memory is not None:
            memory = memory.rows(0, rows)
            if backprop_segments is not None:
                memory = memory.cut_gradient(after % (backprop_segments + 1) == backprop_segments)
        # With only the last segment pooled, a step whose segments are all out of the gradient's reach needs no graph.
        needs_graph = not last_only or backprop_segments is None or bool((after <= backprop_segments).any())
        pieces = [documents[order[i]][t * segment : (t + 1) * segment] for i in range(rows)]
        with torch.set_grad_enabled(torch.is_grad_enabled() and needs_graph):
            vectors, memory = _read_step(pieces, memory, budget, run_pass, carried_tokens)
        steps.append(vectors)  # (E, H)
    batch = len(documents)
    stacked = torch.stack([F.pad(v, (0, 0, 0, batch - v.shape[0])) for v in steps], 1)  # (B, N, H), reading order
    inverse = torch.empty(batch, dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(batch)
    vectors = stacked[inverse.to(stacked.device)]  # (B, N, H), the caller's order
    mask = torch.arange(len(steps))[None, :] < torch.tensor(counts)[:, None]  # (B, N)
    return Units(vectors, mask.to(vectors.device))


def _read_step(pieces, memory, budget: PassBudget, run_pass: Callable, carried_tokens: int):
    """One step, in as many passes as the budget asks; returns (E, H) vectors (a copy, so that no view keeps a
    pass's hidden states alive) and the joined memory."""
    rows = len(pieces)
    width = max(p.shape[0] for p in pieces) + 2 + carried_tokens
    per_pass = max(1, min(budget.max_windows, budget.max_tokens // width))
    if per_pass >= rows:
        vectors, memory = run_pass(pieces, memory)
        return vectors.clone(), memory
    vectors, memories = [], []
    for start in range(0, rows, per_pass):
        stop = min(rows, start + per_pass)
        v, m = run_pass(pieces[start:stop], None if memory is None else memory.rows(start, stop))
        vectors.append(v)
        memories.append(m)
    return torch.cat(vectors), (None if memories[0] is None else type(memories[0]).join(memories))


def segment_problems(config, path: str) -> list[str]:
    """Checks shared by `recurrence` and `rmt`."""
    out = []
    if config.segment < 1:
        out.append(f"{path}.segment must be >= 1, got {config.segment}")
    if config.backprop_segments is not None and config.backprop_segments < 0:
        out.append(f"{path}.backprop_segments must be >= 0 or null, got {config.backprop_segments}")
    out += one_of(f"{path}.pooling", config.pooling, SEGMENT_POOLINGS)
    out += one_of(f"{path}.token_pooling", config.token_pooling, TOKEN_POOLINGS)
    return out


def base_model(backbone: nn.Module) -> nn.Module:
    """The transformers model inside a peft wrapper (or the backbone itself)."""
    return backbone.get_base_model() if hasattr(backbone, "get_base_model") else backbone


# --------------------------------------------------------------------------------------------------------------
# The memory and the attention function that reads and writes it


@dataclass
class LayerMemory:
    """Per layer, the keys and values of the latest tokens of earlier segments, left-padded to M slots."""

    keys: list[torch.Tensor]  # per layer (E, A, M, D)
    values: list[torch.Tensor]  # per layer (E, A, M, D)
    valid: torch.Tensor  # (E, M) bool: slot holds a token
    ages: torch.Tensor  # (E, M) long: 1 = the previous segment, 2 = the one before, ...

    def rows(self, start: int, stop: int) -> "LayerMemory":
        return LayerMemory([k[start:stop] for k in self.keys], [v[start:stop] for v in self.values],
                           self.valid[start:stop], self.ages[start:stop])

    def cut_gradient(self, cut: torch.Tensor) -> "LayerMemory":
        if bool(cut.all()):
            keys, values = [k.detach() for k in self.keys], [v.detach() for v in self.values]
            return LayerMemory(keys, values, self.valid, self.ages)
        if not bool(cut.any()):
            return self
        where = cut.to(self.valid.device)[:, None, None, None]  # (E, 1, 1, 1)
        return LayerMemory([torch.where(where, k.detach(), k) for k in self.keys],
                           [torch.where(where, v.detach(), v) for v in self.values], self.valid, self.ages)

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
        )


class StepState:
    """What the attention function needs for one pass of one step: the memory to read, the current segment's
    padding, and where each key goes in the memory written for the next segment (the same for every layer)."""

    def __init__(self, memory: LayerMemory | None, valid: torch.Tensor, max_tokens: int, max_age: int,
                 bias: torch.Tensor | None, layers: int):
        rows, length = valid.shape  # (E, L)
        if memory is None:
            memory_valid = valid.new_zeros((rows, 0))  # (E, 0)
            memory_ages = torch.zeros((rows, 0), dtype=torch.long, device=valid.device)
        else:
            memory_valid, memory_ages = memory.valid, memory.ages  # (E, M)
        self.memory, self.bias, self.memory_ages = memory, bias, memory_ages
        self.key_valid = torch.cat([memory_valid, valid], 1)  # (E, M + L)
        # Ages every key will have for the next segment; the memory keeps the latest `max_tokens` young enough.
        ages = torch.cat([memory_ages + 1, torch.ones_like(valid, dtype=torch.long)], 1)  # (E, M + L)
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
        self.next_keys: list[torch.Tensor | None] = [None] * layers
        self.next_values: list[torch.Tensor | None] = [None] * layers

    def mask(self, layer: int, dtype: torch.dtype) -> torch.Tensor:
        """Key mask for sdpa: (E, 1, 1, M + L) bool, or with a memory bias (E, A, 1, M + L) additive."""
        if self.bias is None or self.memory_ages.shape[1] == 0:
            return self.key_valid[:, None, None, :]
        table = self.bias[layer]  # (A, S)
        ages = (self.memory_ages - 1).clamp(0, table.shape[1] - 1)  # (E, M)
        memory_bias = table[:, ages].permute(1, 0, 2)  # (E, A, M)
        current = memory_bias.new_zeros((*memory_bias.shape[:2], self.key_valid.shape[1] - ages.shape[1]))
        scores = torch.cat([memory_bias, current], 2).to(dtype)  # (E, A, M + L)
        scores = scores.masked_fill(~self.key_valid[:, None, :], torch.finfo(dtype).min)
        return scores[:, :, None, :]  # (E, A, 1, M + L)

    def attend(self, module: nn.Module, query, key, value, dropout: float, scaling: float | None) -> torch.Tensor:
        layer = module.layer_idx
        if layer is None:
            raise LongbertError("strategy recurrence needs attention modules that know their layer (layer_idx)")
        if self.memory is not None:
            key = torch.cat([self.memory.keys[layer].to(key.dtype), key], 2)  # (E, A, M + L, D)
            value = torch.cat([self.memory.values[layer].to(value.dtype), value], 2)  # (E, A, M + L, D)
        gather = self.index[:, None, :, None].expand(-1, key.shape[1], -1, key.shape[3])  # (E, A, M', D)
        self.next_keys[layer] = torch.gather(key, 2, gather)  # (E, A, M', D)
        self.next_values[layer] = torch.gather(value, 2, gather)
        output = F.scaled_dot_product_attention(query, key, value, attn_mask=self.mask(layer, query.dtype),
                                                dropout_p=dropout, scale=scaling)  # (E, A, L, D)
        return output.transpose(1, 2).contiguous()  # (E, L, A, D)

    def next_memory(self) -> LayerMemory:
        if any(k is None for k in self.next_keys):
            raise LongbertError("strategy recurrence: the backbone did not run every layer through its attention")
        return LayerMemory(self.next_keys, self.next_values, self.next_valid, self.next_ages)


def recurrence_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """AttentionInterface function: memory attention when the call carries a StepState, plain sdpa otherwise."""
    state = kwargs.pop(STATE_ARGUMENT, None)
    if state is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    return state.attend(module, query, key, value, dropout, scaling), None


def use_recurrence_attention(backbone: nn.Module) -> None:
    """Route the backbone's attention through `recurrence_attention` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    model = base_model(backbone)
    if not getattr(model, "_supports_attention_backend", False):
        raise LongbertError(
            f"strategy recurrence needs a backbone whose attention goes through transformers' AttentionInterface; "
            f"{type(model).__name__} does not"
        )
    AttentionInterface.register(ATTENTION_NAME, recurrence_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, sdpa_mask)
    if model.config._attn_implementation != ATTENTION_NAME:
        model.set_attn_implementation(ATTENTION_NAME)
    if model.config._attn_implementation != ATTENTION_NAME:
        raise LongbertError(f"strategy recurrence could not set the attention of {type(model).__name__}")


# --------------------------------------------------------------------------------------------------------------
# The strategy


@dataclass
class RecurrenceConfig:
    name: str = "recurrence"
    segment: int = option(510, "content tokens per segment ([CLS]/[SEP] come on top); each segment is one unit")
    memory: int = option(512, "memory per layer, in tokens: keys/values of the latest tokens of earlier segments that each segment also attends to; 0 = independent segments")
    memory_segments: int = option(1, "how many earlier segments the memory spans; older tokens leave it")
    backprop_segments: int | None = option(0, "segment boundaries gradients cross through the memory: 0 stops them (Transformer-XL), null = the whole document")
    memory_bias: bool = option(True, "learned attention bias on memory keys, per layer, head and segment age (zero at start)")
    pooling: str = option("mean", "document vector from segment vectors: last, mean, max, attention or transformer")
    token_pooling: str = option("cls", "segment vector: cls ([CLS] state) or mean (mean of token states)")

    def problems(self, path: str) -> list[str]:
        out = segment_problems(self, path)
        if self.memory < 0:
            out.append(f"{path}.memory must be >= 0, got {self.memory}")
        if self.memory_segments < 1:
            out.append(f"{path}.memory_segments must be >= 1, got {self.memory_segments}")
        elif self.memory > self.memory_segments * (self.segment + 2) and self.segment >= 1:
            out.append(
                f"{path}.memory must be <= memory_segments * (segment + 2) = {self.memory_segments * (self.segment + 2)} "
                f"(what {self.memory_segments} segment(s) can fill), got {self.memory}; raise memory_segments or lower memory"
            )
        return out


@register("recurrence", RecurrenceConfig, "segments read in order with a Transformer-XL memory of earlier segments' keys/values at every layer")
class RecurrenceStrategy(nn.Module):
    def __init__(self, config: RecurrenceConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.pooler = build_pooler(config.pooling, hidden_size)
        self.register_parameter("memory_bias", None)  # (layers, A, S), made by adapt_backbone

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.segment, "strategy.segment")
        if self.config.memory == 0:
            return
        use_recurrence_attention(backbone)
        if self.config.memory_bias:
            settings = base_model(backbone).config
            shape = (settings.num_hidden_layers, settings.num_attention_heads, self.config.memory_segments)
            if self.memory_bias is None or tuple(self.memory_bias.shape) != shape:
                self.memory_bias = nn.Parameter(torch.zeros(shape))

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        cfg = self.config
        device = next(backbone.parameters()).device
        layers = base_model(backbone).config.num_hidden_layers

        def run_pass(pieces: list[torch.Tensor], memory: LayerMemory | None):
            input_ids, attention_mask = wrap_segments(pieces, self.special, device)  # (E, L), (E, L)
            if cfg.memory == 0:
                hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (E, L, H)
                return pool_tokens(hidden, attention_mask, cfg.token_pooling), None
            state = StepState(memory, attention_mask.bool(), cfg.memory, cfg.memory_segments, self.memory_bias, layers)
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask,
                              **{STATE_ARGUMENT: state}).last_hidden_state  # (E, L, H)
            return pool_tokens(hidden, attention_mask, cfg.token_pooling), state.next_memory()  # (E, H)

        return read_segments(documents, cfg.segment, self.budget, cfg.backprop_segments, cfg.pooling == "last",
                             run_pass, cfg.memory, device)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return segment_spans(length, self.config.segment)

    def pool(self, units: Units) -> Pooled:
        return self.pooler(units)
