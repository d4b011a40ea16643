"""`bigbird`: the whole document (up to `max_tokens`) in one pass of the backbone, with the block-sparse attention
of BigBird (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences") put into any BERT-family encoder.

The pass ([CLS] document [SEP], padded to a multiple of `block_size`) is cut into blocks of S tokens:
  - the first `global_blocks` blocks (they hold [CLS]) are global: their queries read every key of the document,
    and every query reads them;
  - every other query block reads its `window_blocks` neighbouring blocks (itself in the middle);
  - in training, each of those also reads `random_blocks` blocks drawn (from a seeded generator) among the rest of
    its own document; at evaluation it reads none, so predictions are deterministic.
A query reads at most (global + window + random) blocks, so time and memory grow linearly with the length: the
only score tensors are (W·Q, A, S, K·S) for the sparse blocks and (W, A, g·S, L) for the global rows; no (L, L)
tensor, score or mask, is ever built.

Short documents. A document of at most `full_attention_up_to` tokens (with [CLS]/[SEP]) is read with ordinary
full attention, exactly as `truncate` reads it; a longer one block-sparse. The rule looks at that document's own
length, on every call; nothing is remembered between calls, and one batch may mix both (they go through
separate passes), so a document's vector never depends on what it was batched with.

Positions past 512. `adapt_backbone` extends the learned position table to `max_tokens`; the first 512 positions
are unchanged, so short documents read exactly as before. `position_scheme` says how the rows past 512 start:
  - copy: position p gets the learned vector of p mod 512, as the Longformer authors did when converting RoBERTa
    (they report MLM bits-per-character of 1.957 with copied positions, falling to 1.753 after 2K steps of
    continued pretraining). The model cannot tell p from p + 512 until fine-tuning teaches it.
  - interpolate: positions 512 .. max_tokens-1 walk the learned table once from its start to its end, each taking
    the linear interpolation of its two nearest learned rows (with max_tokens 4096 a learned position covers about
    7 tokens). No two positions past 512 share a vector, and nearby positions get nearby vectors; the price is
    that a long position's vector is that of a smaller, "slowed down" one.
Either way the rows past 512 must be able to learn: in full fine-tuning they are ordinary weights; under LoRA the
position table trains in full beside the adapters (`lora_modules_to_save`, through peft's modules_to_save, saved
with the adapter); a frozen backbone keeps them as they started.

Units. With `unit_tokens: 0` the document is one unit, its pooled token states (as before units existed). With
`unit_tokens: k` the content tokens' states (each read with the whole document's block-sparse attention) are cut into
consecutive spans of k tokens, each span's mean is one unit, and `pooling` (mean, max, attention, gated, vote,
transformer: the poolers chunk and sliding use) makes the document vector. So a learned pooler can find the part of
the document that decides the label, as it can over chunks, while every token was read in the context of the whole
document.

Global bias. The global blocks hold the document's first tokens, and every block reads them: on a document made of
several parts, each part's tokens read the first part. `global_bias: b` adds a learned bias per layer and head,
starting at b, to every score between a global and a non-global token, both ways (a strategy weight: it trains at
train.head_learning_rate, as recurrence's distance bias does). With b = -3 a global key gets about e^-3 = 5% of the
weight a window key of the same score gets, so a pretrained model starts out reading each block mostly within its
window, and training raises the bias where reading the whole document helps. `null` (the default) adds nothing.

How it reaches the backbone. `adapt_backbone` installs `block_sparse_attention` as the backbone's attention
implementation `longbert_block_sparse`, through the installer shared with `recurrence` (strategies/attention.py).
Called with the keyword argument `block_sparse_plan` (built per pass by this strategy and passed through
`backbone(...)`), the backbone runs block-sparse; called without one (short documents) it is ordinary full
attention with a key-padding mask. So the mode is an argument of each call, never a state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from longbert.strategies.attention import base_model, install_attention, layer_head_weight
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, register
from longbert.strategies.configs import BigBirdConfig
from longbert.strategies.pooling import build_pooler, weights_carry_content
from longbert.strategies.positions import extend_positions, position_table
from longbert.strategies.windows import encode_windows, gather_units, window_spans, window_token_states

ATTENTION_NAME = "longbert_block_sparse"
PLAN_ARGUMENT = "block_sparse_plan"


# --------------------------------------------------------------------------------------------------------------
# The attention pattern


@dataclass
class BlockSparsePlan:
    """Which key blocks each query block reads in one pass; built by `plan_pass`, handed to the backbone as the
    keyword argument `block_sparse_plan` and read by `block_sparse_attention` in every layer."""

    block_size: int
    global_blocks: int
    token_mask: torch.Tensor  # (W, L) bool, True at real tokens
    key_blocks: torch.Tensor  # (layers or 1, W or 1, Q, K) long: the blocks each sparse query block reads
    key_valid: torch.Tensor  # (layers or 1, W or 1, Q, K) bool: False where a slot is off the sequence or a repeat
    global_bias: torch.Tensor | None = None  # (layers, A): added to scores between a global and a non-global token


def fixed_key_blocks(n_blocks: int, global_blocks: int, window_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The key blocks every sparse query block reads in every pass: the global blocks, then its window.
    Returns blocks and validity, both (Q, g + window_blocks), for the Q = n_blocks - g non-global query blocks."""
    g, radius = global_blocks, window_blocks // 2
    query = torch.arange(g, n_blocks)  # (Q,) block index of each sparse query block
    window = query[:, None] + torch.arange(-radius, radius + 1)[None]  # (Q, window_blocks)
    glob = torch.arange(g).expand(query.shape[0], g)  # (Q, g)
    # A window block that is global is already read as global: reading it twice would count it twice in softmax.
    window_valid = (window >= g) & (window < n_blocks)
    blocks = torch.cat([glob, window.clamp(0, n_blocks - 1)], dim=1)  # (Q, K)
    valid = torch.cat([torch.ones_like(glob, dtype=torch.bool), window_valid], dim=1)  # (Q, K)
    return blocks, valid


def draw_random_blocks(
    generator: torch.Generator, layers: int, real_blocks: torch.Tensor, n_blocks: int, global_blocks: int,
    window_blocks: int, random_blocks: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`random_blocks` blocks per sparse query block, per layer and per document, each drawn uniformly among its
    document's non-global blocks outside the query's window (`real_blocks` (W,): blocks holding real tokens per
    row, so padding is never drawn). A draw that repeats an earlier one of the same query block is marked
    invalid instead of counted twice. Returns blocks and validity, both (layers, W, Q, random_blocks)."""
    g, radius = global_blocks, window_blocks // 2
    query = torch.arange(g, n_blocks)[None]  # (1, Q)
    n = real_blocks[:, None]  # (W, 1)
    # Eligible: [g, lo) and [hi, n), where [lo, hi) is the window cut to the document's non-global blocks.
    lo = torch.minimum((query - radius).clamp(min=g), n)  # (W, Q)
    hi = torch.minimum((query + radius + 1).clamp(min=g), n)  # (W, Q)
    before = lo - g  # (W, Q) eligible blocks left of the window
    eligible = (n - g) - (hi - lo)  # (W, Q)
    shape = (layers, *eligible.shape, random_blocks)
    pick = (torch.rand(shape, generator=generator) * eligible.clamp(min=0)[..., None]).long()  # (layers, W, Q, R)
    before = before[..., None]
    blocks = torch.where(pick < before, g + pick, hi[..., None] + (pick - before))  # (layers, W, Q, R)
    valid = (eligible > 0)[..., None].expand(shape).clone()
    repeats = (blocks[..., :, None] == blocks[..., None, :]).tril(diagonal=-1).any(-1)  # (layers, W, Q, R)
    valid &= ~repeats
    return blocks.clamp(0, n_blocks - 1), valid


def with_bias(mask: torch.Tensor, bias: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """A boolean key mask (R, 1, 1, N) -> additive scores (R, A, 1, N): `bias` (A,) at the keys `where` (N,) marks, 0
    at the others, the dtype's lowest value where the mask is False."""
    scores = bias[:, None] * where[None, :].to(bias.dtype)  # (A, N)
    return scores[None, :, None, :].masked_fill(~mask, torch.finfo(bias.dtype).min)  # (R, A, 1, N)


def block_sparse_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    plan: BlockSparsePlan,
    dropout: float = 0.0,
    scaling: float | None = None,
) -> torch.Tensor:
    """Block-sparse attention following `plan`: query/key/value (W, A, L, D) -> output (W, L, A, D). Installed
    (see `install_attention`) for calls that carry `block_sparse_plan`; the padding comes from the plan."""
    rows, heads, length, size = query.shape  # W, A, L, D
    s, g = plan.block_size, plan.global_blocks
    n_blocks = length // s  # G
    key_mask = plan.token_mask  # (W, L)

    layer = getattr(module, "layer_idx", None) or 0
    bias = None if plan.global_bias is None else plan.global_bias[layer].to(query.dtype)  # (A,)

    # Global query rows read every key: (W, A, g·S, L) scores, linear in L.
    global_mask = key_mask[:, None, None, :]  # (W, 1, 1, L)
    if bias is not None:  # non-global keys get the bias
        global_mask = with_bias(global_mask, bias, torch.arange(length, device=query.device) >= g * s)  # (W, A, 1, L)
    global_out = F.scaled_dot_product_attention(
        query[:, :, : g * s], key, value, attn_mask=global_mask, dropout_p=dropout, scale=scaling
    )  # (W, A, g·S, D)
    global_out = global_out.transpose(1, 2)  # (W, g·S, A, D)
    if n_blocks == g:
        return global_out.contiguous()

    # Sparse query blocks read their K key blocks, gathered per query block.
    blocks = plan.key_blocks[layer % plan.key_blocks.shape[0]]  # (W or 1, Q, K)
    valid = plan.key_valid[layer % plan.key_valid.shape[0]]  # (W or 1, Q, K)
    q_blocks, k_blocks = blocks.shape[-2], blocks.shape[-1]  # Q, K
    row = torch.arange(rows, device=query.device)[:, None, None]  # (W, 1, 1)
    q = query.transpose(1, 2)[:, g * s :].reshape(rows * q_blocks, s, heads, size).transpose(1, 2)  # (W·Q, A, S, D)

    def gather(x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2).reshape(rows, n_blocks, s, heads, size)  # (W, G, S, A, D)
        x = x[row, blocks]  # (W, Q, K, S, A, D)
        return x.reshape(rows * q_blocks, k_blocks * s, heads, size).transpose(1, 2)  # (W·Q, A, K·S, D)

    mask = key_mask.view(rows, n_blocks, s)[row, blocks] & valid[..., None]  # (W, Q, K, S)
    mask = mask.reshape(rows * q_blocks, 1, 1, k_blocks * s)  # (W·Q, 1, 1, K·S)
    if bias is not None:  # the first g key slots are the global blocks (fixed_key_blocks puts them first)
        mask = with_bias(mask, bias, torch.arange(k_blocks * s, device=query.device) < g * s)  # (W·Q, A, 1, K·S)
    # Every row of `mask` is true somewhere: block 0 is always read, and it holds [CLS].
    sparse_out = F.scaled_dot_product_attention(
        q, gather(key), gather(value), attn_mask=mask, dropout_p=dropout, scale=scaling
    )  # (W·Q, A, S, D)
    sparse_out = sparse_out.transpose(1, 2).reshape(rows, q_blocks * s, heads, size)  # (W, Q·S, A, D)
    return torch.cat([global_out, sparse_out], dim=1)  # (W, L, A, D)


# --------------------------------------------------------------------------------------------------------------
# The strategy


@register("bigbird")
class BigBirdStrategy(nn.Module):
    def __init__(self, config: BigBirdConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget
        self.generator = torch.Generator().manual_seed(config.random_seed)
        self.register_parameter("global_bias", None)  # (layers, A), made by adapt_backbone when config.global_bias
        # One unit needs no pooler: a mean (no weights) stands in, so that no weight is left untrained.
        self.pooler = build_pooler(config.pooling if config.unit_tokens else "mean", hidden_size)

    def adapt_backbone(self, backbone: nn.Module) -> None:
        # Check first: a backbone that cannot take block-sparse attention is refused before anything changes.
        position_table(base_model(backbone))
        install_attention(backbone, "bigbird", ATTENTION_NAME, PLAN_ARGUMENT, block_sparse_attention)
        extend_positions(base_model(backbone), self.config.max_tokens, self.config.position_scheme)
        if self.config.global_bias is not None:
            self.global_bias = layer_head_weight(self.global_bias, backbone, (), self.config.global_bias)

    # The extended position table trains in full under LoRA (its rows past 512 start as copies or interpolations
    # and must learn to tell positions apart; adapters on attention cannot change them).
    lora_modules_to_save = ("position_embeddings",)

    def uses_full_attention(self, tokens: int) -> bool:
        """The short-document rule: `tokens` counts [CLS]/[SEP]."""
        return tokens <= self.config.full_attention_up_to

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        if self.config.unit_tokens:
            return self.encode_spans(backbone, documents)
        c = self.config
        kept = [ids[: c.max_tokens - 2] for ids in documents]  # longer documents keep their head
        full = [i for i, ids in enumerate(kept) if self.uses_full_attention(ids.shape[0] + 2)]
        sparse = [i for i, ids in enumerate(kept) if not self.uses_full_attention(ids.shape[0] + 2)]
        vectors: list[torch.Tensor | None] = [None] * len(documents)
        if full:
            out = encode_windows(backbone, [kept[i] for i in full], self.special, self.budget,
                                 c.token_pooling)  # (B', H)
            for row, i in enumerate(full):
                vectors[i] = out[row]
        if sparse:
            out = self.encode_sparse(backbone, [kept[i] for i in sparse])  # (B', H)
            for row, i in enumerate(sparse):
                vectors[i] = out[row]
        return gather_units(torch.stack(vectors), [1] * len(documents))  # (B, 1, H)

    def encode_spans(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units:
        """Documents -> one unit per `unit_tokens` consecutive content tokens read: the mean of their states, each
        state computed as `encode_tokens` reads it (the whole head in one pass, block-sparse when long). Units.sizes
        holds each span's token count, so that mean pooling weighs a short last span by what it holds."""
        k = self.config.unit_tokens
        vectors, sizes, counts = [], [], []
        for states in self.encode_tokens(backbone, documents):  # (T', H)
            # ceil(T' / k) x (<= k, H); an empty document is one zero vector (the head's bias decides it)
            spans = states.split(k) if states.shape[0] else (states.new_zeros(1, states.shape[1]),)
            vectors += [span.mean(0) for span in spans]
            sizes += [float(span.shape[0]) for span in spans]
            counts.append(len(spans))
        return gather_units(torch.stack(vectors), counts, sizes)  # (B, N, H)

    def encode_sparse(self, backbone: nn.Module, documents: list[torch.Tensor]) -> torch.Tensor:
        """Documents (each at most max_tokens - 2 content ids) -> (B, H), block-sparse, in passes bounded by the
        budget; each pass is padded to its longest document rounded up to a block multiple."""
        return encode_windows(backbone, documents, self.special, self.budget, self.config.token_pooling,
                              multiple=self.config.block_size, pass_arguments=self.sparse_pass(backbone))  # (B, H)

    def sparse_pass(self, backbone: nn.Module):
        """The per-pass keyword arguments that make `backbone` read a pass block-sparse: attention_mask (W, L) ->
        {block_sparse_plan: its plan}, random blocks drawn when the backbone is training."""
        layers = base_model(backbone).config.num_hidden_layers

        def plan(attention_mask: torch.Tensor) -> dict:  # (W, L)
            return {PLAN_ARGUMENT: self.plan_pass(attention_mask.bool(), layers, random=backbone.training)}

        return plan

    def encode_tokens(self, backbone: nn.Module, documents: list[torch.Tensor]) -> list[torch.Tensor]:
        """Token-level reading (continued pretraining): the hidden state of every content token read, [CLS]/[SEP]
        left out, one (T', H) tensor per document with T' = min(T, max_tokens - 2) (the head that `encode` reads).
        Short documents full attention, longer ones block-sparse, exactly as `encode` reads them."""
        kept = [ids[: self.config.max_tokens - 2] for ids in documents]
        sparse = [not self.uses_full_attention(ids.shape[0] + 2) for ids in kept]
        out: list[torch.Tensor | None] = [None] * len(documents)
        for block_sparse in (False, True):
            chosen = [i for i, s in enumerate(sparse) if s == block_sparse]
            if not chosen:
                continue
            extra = {}
            if block_sparse:
                extra = dict(multiple=self.config.block_size, pass_arguments=self.sparse_pass(backbone))
            states = window_token_states(backbone, [kept[i] for i in chosen], self.special, self.budget, **extra)
            for i, state in zip(chosen, states):
                out[i] = state  # (T', H)
        return out

    def plan_pass(self, token_mask: torch.Tensor, layers: int, random: bool) -> BlockSparsePlan:
        """The attention plan for one pass of `token_mask` (W, L) (L a block multiple). With `random`, every layer
        gets its own draw of random blocks, made here, before the backbone runs, so that gradient checkpointing
        recomputes a layer with the same blocks."""
        c = self.config
        rows, length = token_mask.shape
        n_blocks = length // c.block_size
        g = min(c.global_blocks, n_blocks)
        blocks, valid = fixed_key_blocks(n_blocks, g, c.window_blocks)  # (Q, K')
        blocks, valid = blocks[None, None], valid[None, None]  # (1, 1, Q, K')
        if random and c.random_blocks > 0 and n_blocks > g:
            real_blocks = token_mask.view(rows, n_blocks, c.block_size).any(-1).sum(-1).cpu()  # (W,)
            extra, extra_valid = draw_random_blocks(
                self.generator, layers, real_blocks, n_blocks, g, c.window_blocks, c.random_blocks
            )  # (layers, W, Q, R)
            shape = (layers, rows, *blocks.shape[-2:])
            blocks = torch.cat([blocks.expand(shape), extra], dim=-1)  # (layers, W, Q, K)
            valid = torch.cat([valid.expand(shape), extra_valid], dim=-1)  # (layers, W, Q, K)
        device = token_mask.device
        return BlockSparsePlan(c.block_size, g, token_mask, blocks.to(device), valid.to(device), self.global_bias)

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        """The head that is read: one unit, or one per `unit_tokens` consecutive tokens of it."""
        read = min(length, self.config.max_tokens - 2)
        if self.config.unit_tokens:
            return window_spans(read, self.config.unit_tokens, self.config.unit_tokens)
        return [[(0, read)]]

    def weights_carry_content(self) -> bool:
        """One unit weighs 1; spans' weights follow their content when the pooler's do (max, attention, gated)."""
        return not self.config.unit_tokens or weights_carry_content(self.pooler)

    def checkpoint_state(self) -> dict[str, torch.Tensor]:
        """The random-block generator, so that a resumed run draws the blocks an uninterrupted one would."""
        return {"generator": self.generator.get_state()}

    def load_checkpoint_state(self, state: dict[str, torch.Tensor]) -> None:
        self.generator.set_state(state["generator"])

    def pool(self, units: Units) -> Pooled:
        if not self.config.unit_tokens:
            return Pooled(units.vectors[:, 0], units.mask.to(units.vectors.dtype))  # (B, H)
        return self.pooler(units)  # (B, H)
