"""Windows and the backbone passes that carry them.

Cut documents into windows (truncate, chunk, sliding), and run pieces of content through the backbone in bounded,
dynamically padded passes: `build_pass` lays out one pass ([CLS] piece [SEP], padded) for every strategy, bigbird
and the segment strategies included; `run_passes` plans and runs the passes of many windows (through the backbone
in `encode_windows`, through an exported graph in longbert/inference/exported.py); `window_token_states` keeps every
token's state instead of pooling them (token-level reading, for continued pretraining)."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.attention import base_model
from longbert.strategies.base import PassBudget, SpecialTokens, Units
from longbert.strategies.pooling import pool_tokens


def split_windows(ids: torch.Tensor, window: int, stride: int) -> list[torch.Tensor]:
    """Cut one document's content ids (T,) into windows of at most `window` tokens starting every `stride`
    tokens; the last window ends at the document's end. An empty document gives one empty window."""
    length = ids.shape[0]
    windows = []
    start = 0
    while True:
        windows.append(ids[start : start + window])
        if start + window >= length:
            return windows
        start += stride


def new_tokens(windows: list[torch.Tensor], stride: int) -> list[int]:
    """How many tokens each window of `split_windows` adds to the windows before it: the first all of its tokens,
    each later one what lies past the previous window's end (the window ends at start + length, starts `stride`
    after its predecessor). Chunks (stride = window) add all their tokens; overlapping windows add about `stride`,
    and a last window that reaches one token past its predecessor adds one."""
    out, reached = [], 0
    for k, w in enumerate(windows):
        end = k * stride + w.shape[0]
        out.append(max(end - reached, 0))
        reached = max(reached, end)
    return out


def window_spans(length: int, window: int, stride: int) -> list[list[tuple[int, int]]]:
    """The token range of each window `split_windows` cuts from a document of `length` tokens (one range a unit)."""
    return [[(int(w[0]), int(w[-1]) + 1)] if len(w) else [(0, 0)]
            for w in split_windows(torch.arange(length), window, stride)]


def plan_passes(lengths: list[int], budget: PassBudget) -> list[list[int]]:
    """Group window indices, longest first, into passes of at most `budget.max_windows` windows,
    `budget.max_tokens` padded tokens and `budget.max_padding` padding share (a single window longer than the token
    budget gets a pass of its own)."""
    budget = budget.on(None)  # limits still left to the device: the CPU's (`run_passes` sets them for its device)
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    passes: list[list[int]] = []
    real = 0  # real tokens in the current pass
    for index in order:
        if passes:
            current = passes[-1]
            longest = lengths[current[0]]  # sorted, so the first is the longest of the pass
            padded = (len(current) + 1) * longest
            if (len(current) < budget.max_windows and padded <= budget.max_tokens
                    and padded - real - lengths[index] <= budget.max_padding * padded):
                current.append(index)
                real += lengths[index]
                continue
        passes.append([index])
        real = lengths[index]
    return passes


def padded_width(tokens: int, multiple: int) -> int:
    """`tokens` rounded up to a multiple of `multiple`."""
    return math.ceil(tokens / multiple) * multiple


def build_pass(
    pieces: list[torch.Tensor], special: SpecialTokens, device, multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """Content pieces (each (T,), no special tokens) -> one backbone pass, each row [CLS] piece [SEP] then padding.

    Returns input_ids (W, L) (pad ids after [SEP]) and attention_mask (W, L) (1 up to [SEP], 0 after), with L the
    longest piece plus 2, rounded up to a multiple of `multiple` (bigbird's block size; 1: no rounding)."""
    lengths = [p.shape[0] + 2 for p in pieces]
    width = padded_width(max(lengths), multiple)
    # Laid out where the pieces are (token ids on the CPU) and moved to the device in one copy each, not row by row:
    # on a GPU each row's copy would be a transfer and several kernel launches of its own.
    here = pieces[0].device
    input_ids = torch.full((len(pieces), width), special.pad_id, dtype=torch.long, device=here)  # (W, L)
    attention_mask = torch.zeros((len(pieces), width), dtype=torch.long, device=here)  # (W, L)
    for row, (piece, n) in enumerate(zip(pieces, lengths)):
        input_ids[row, 0] = special.cls_id
        input_ids[row, 1 : n - 1] = piece.to(here)
        input_ids[row, n - 1] = special.sep_id
        attention_mask[row, :n] = 1
    return input_ids.to(device), attention_mask.to(device)


def run_passes(
    windows: list[torch.Tensor],
    special: SpecialTokens,
    budget: PassBudget,
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    device="cpu",
    multiple: int = 1,
) -> torch.Tensor:
    """Lay content windows out in passes and call `run(input_ids (W, L), attention_mask (W, L)) -> (W, H)` on each;
    returns (W, H) in the windows' order. (`run` may return (W, ...) of any shape that is the same for every pass:
    `window_token_states` returns token states padded to one width.)

    Windows are sorted by length and packed into passes bounded by `budget`; each pass is padded only to its
    own longest window (rounded up to a multiple of `multiple`), so a batch of short reviews never pays for 512
    positions. `run` is the backbone and its token pooling (`encode_windows`), or an exported encoder graph."""
    lengths = [padded_width(w.shape[0] + 2, multiple) for w in windows]
    out: torch.Tensor | None = None  # (W, H), filled pass by pass
    for indices in plan_passes(lengths, budget.on(device)):
        input_ids, attention_mask = build_pass([windows[i] for i in indices], special, device, multiple)  # (W, L)
        vectors = run(input_ids, attention_mask)  # (W, H)
        if out is None:
            out = vectors.new_zeros((len(windows), *vectors.shape[1:]))
        # Copy into `out` rather than keep views: a view of hidden[:, 0] would keep the whole pass alive.
        out[torch.tensor(indices, device=vectors.device)] = vectors
    return out  # (W, H)


def encode_windows(
    backbone: nn.Module,
    windows: list[torch.Tensor],
    special: SpecialTokens,
    budget: PassBudget,
    token_pooling: str = "cls",
    multiple: int = 1,
    pass_arguments: Callable[[torch.Tensor], dict] | None = None,
) -> torch.Tensor:
    """Run content windows through the backbone, each wrapped as [CLS] window [SEP], in the passes `run_passes`
    lays out; returns (W, H). `pass_arguments(attention_mask (W, L))` gives extra keyword arguments for the
    backbone, per pass (bigbird's attention plan)."""

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = pass_arguments(attention_mask) if pass_arguments else {}
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state  # (W, L, H)
        return pool_tokens(hidden, attention_mask, token_pooling)  # (W, H)

    device = next(backbone.parameters()).device
    return run_passes(windows, special, budget, run, device, pass_multiple(backbone, windows, multiple, device))


def pass_multiple(backbone: nn.Module, windows: list[torch.Tensor], multiple: int, device: torch.device) -> int:
    """What a pass's width is rounded up to: `multiple` on a CPU; on an accelerator, also a multiple of
    ACCELERATOR_WIDTH_MULTIPLE where the longest window so rounded still fits the backbone's positions. A GPU's
    attention kernels plan for each shape they meet (cuDNN's, the first time, for milliseconds), so fewer widths
    cost less than the few padding tokens they add (benchmarks/bench_gpu_eval.py)."""
    if device.type == "cpu" or not windows:
        return multiple
    rounded = math.lcm(multiple, ACCELERATOR_WIDTH_MULTIPLE)
    longest = max(w.shape[0] for w in windows) + 2
    return rounded if padded_width(longest, rounded) <= usable_positions(backbone) else multiple


ACCELERATOR_WIDTH_MULTIPLE = 64


def window_token_states(
    backbone: nn.Module,
    windows: list[torch.Tensor],
    special: SpecialTokens,
    budget: PassBudget,
    multiple: int = 1,
    pass_arguments: Callable[[torch.Tensor], dict] | None = None,
) -> list[torch.Tensor]:
    """Run content windows through the backbone as `encode_windows` does, but keep the hidden states of each
    window's content tokens ([CLS]/[SEP] and padding left out): one (T_w, H) tensor per window, in their order."""
    width = max(padded_width(w.shape[0] + 2, multiple) for w in windows)

    def run(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        extra = pass_arguments(attention_mask) if pass_arguments else {}
        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state  # (W, L, H)
        return nn.functional.pad(hidden, (0, 0, 0, width - hidden.shape[1]))  # (W, width, H): one width for all

    states = run_passes(windows, special, budget, run, next(backbone.parameters()).device, multiple)  # (W, width, H)
    return [states[i, 1 : w.shape[0] + 1] for i, w in enumerate(windows)]  # W x (T_w, H)


def encode_tokens_in_windows(backbone: nn.Module, documents: list[torch.Tensor], window: int,
                             special: SpecialTokens, budget: PassBudget) -> list[torch.Tensor]:
    """Token states of whole documents read as consecutive windows of `window` content tokens, each with its own
    [CLS]/[SEP] (chunk's reading, token by token): one (T, H) tensor per document."""
    per_document = [split_windows(ids, window, window) for ids in documents]
    states = window_token_states(backbone, [w for ws in per_document for w in ws], special, budget)
    out, start = [], 0
    for windows in per_document:
        out.append(torch.cat(states[start : start + len(windows)]))  # (T, H)
        start += len(windows)
    return out


def gather_units(vectors: torch.Tensor, counts: list[int], sizes: list[float] | None = None) -> Units:
    """Regroup flat window vectors (W, H) into padded per-document units (B, N, H) with a mask (B, N), and the flat
    `sizes` (W,) (see `Units.sizes`), when given, into (B, N)."""
    n_max = max(counts)
    batch = len(counts)
    padded = vectors.new_zeros((batch, n_max, vectors.shape[-1]))  # (B, N, H)
    mask = torch.zeros((batch, n_max), dtype=torch.bool, device=vectors.device)  # (B, N)
    flat_sizes = None if sizes is None else torch.as_tensor(sizes, dtype=torch.float32, device=vectors.device)  # (W,)
    padded_sizes = None if sizes is None else torch.zeros((batch, n_max), device=vectors.device)  # (B, N)
    start = 0
    for b, count in enumerate(counts):
        padded[b, :count] = vectors[start : start + count]
        mask[b, :count] = True
        if padded_sizes is not None:
            padded_sizes[b, :count] = flat_sizes[start : start + count]
        start += count
    return Units(padded, mask, padded_sizes)


def cut_windows(ids: torch.Tensor, window: int, stride: int,
                unit_weights: str = "equal") -> tuple[list[torch.Tensor], list[float] | None]:
    """One document's content ids (T,) -> its windows (`split_windows`) and, with `unit_weights` new_tokens, each
    window's size in mean pooling: the tokens it adds to those before it (`new_tokens`; an empty document's one
    empty window still counts, as one token); None with equal. What chunk's and sliding's `windows` hook returns."""
    windows = split_windows(ids, window, stride)
    if unit_weights != "new_tokens":
        return windows, None
    sizes = new_tokens(windows, stride)
    return windows, [float(max(n, 1) if len(windows) == 1 else n) for n in sizes]


def units_of_cuts(vectors: torch.Tensor, cuts: list[tuple[list[torch.Tensor], list[float] | None]]) -> Units:
    """Flat window vectors (W, H), in the order of the documents' cuts ((windows, sizes) from a `windows` hook) ->
    Units (B, N, H) with their mask and, when the cuts carry them, sizes (B, N)."""
    counts = [len(windows) for windows, _ in cuts]
    sizes = None if any(s is None for _, s in cuts) else [n for _, s in cuts for n in s]
    return gather_units(vectors, counts, sizes)  # (B, N, H)


def run_cuts(cuts: list[tuple[list[torch.Tensor], list[float] | None]], special: SpecialTokens, budget: PassBudget,
             run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Units:
    """Each document's windows and sizes (what a strategy's `windows` hook cut) -> Units (B, N, H), every window of
    the batch laid out in the passes `run_passes` plans (on the CPU) and each pass run by `run`: an encoder outside
    the PyTorch model (an exported graph in onnxruntime, an OpenVINO one)."""
    flat = [w for windows, _ in cuts for w in windows]
    return units_of_cuts(run_passes(flat, special, budget, run), cuts)  # (B, N, H)


def encode_cuts(
    backbone: nn.Module,
    cuts: list[tuple[list[torch.Tensor], list[float] | None]],
    special: SpecialTokens,
    budget: PassBudget,
    token_pooling: str,
) -> Units:
    """Each document's windows and sizes (what a strategy's `windows` hook cut) -> Units (B, N, H): all windows of
    the batch go through the backbone together, then are regrouped per document."""
    flat = [w for windows, _ in cuts for w in windows]
    vectors = encode_windows(backbone, flat, special, budget, token_pooling)  # (W, H)
    return units_of_cuts(vectors, cuts)  # (B, N, H)


def check_fits(backbone: nn.Module, tokens: int, what: str) -> None:
    """Fail clearly when `tokens` content tokens plus [CLS]/[SEP] exceed the backbone's positions."""
    positions = usable_positions(backbone)
    if tokens + 2 > positions:
        raise LongbertError(
            f"{what} must leave room for [CLS] and [SEP] in the backbone's {positions} positions "
            f"(at most {positions - 2}), got {tokens}"
        )


def usable_positions(backbone: nn.Module) -> int:
    """How many tokens one pass of the backbone can position: `max_position_embeddings`, less the rows a
    RoBERTa-style table keeps before its first position (padding_idx + 1: 514 rows hold 512 positions)."""
    model = base_model(backbone)
    positions = model.config.max_position_embeddings
    table = getattr(getattr(model, "embeddings", None), "position_embeddings", None)
    if isinstance(table, nn.Embedding) and table.padding_idx is not None:
        positions -= table.padding_idx + 1
    return positions
