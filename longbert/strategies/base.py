"""The Strategy contract and the registry every strategy is listed in.

A strategy decides how a whole tokenized document (never truncated at tokenization time) reaches the backbone
and how the backbone's outputs become one vector per document. It works in two stages so that a frozen
backbone can be run once and cached:

    encode(backbone, documents) -> Units    # runs the backbone: one or more vectors per document
    pool(units)                 -> Pooled   # no backbone: the document vector (and, where it exists, how
                                            # much each unit weighed in it)

Optional hooks, each a runtime-checkable Protocol below (`isinstance(strategy, ReadsWindows)`; a strategy without
them still works everywhere):
    unit_spans(length)        -> for a document of `length` content tokens, each unit's token ranges
                                 [[(start, end), ...], ...] (what compare's error analysis highlights)
    windows(ids)              -> a window strategy's cut of one document's content ids (T,): (the pieces it reads
                                 independently, each wrapped as [CLS] piece [SEP], one unit each; their sizes in
                                 mean pooling, or None); its `encode` uses it, and so does an exported model
                                 (longbert/inference/export.py), which needs it
    window_vectors(hidden, attention_mask)
                              -> with `windows`: the backbone's states of one pass of windows (W, L, H) and their
                                 mask (W, L) -> one vector per window (W, H); what an exported encoder graph ends with
    weights_carry_content()   -> whether the unit weights its pooling gives (`Pooled.weights`) follow what the units
                                 hold (max, learned attention) rather than only how many tokens each adds (mean):
                                 only the first say which unit decided a prediction (explain, compare)
    checkpoint_state()        -> {name: tensor}: state outside the weights that a resumed run needs to continue
    load_checkpoint_state(d)     exactly (bigbird: its random-block generator)
    lora_modules_to_save      a tuple of backbone module names that must train in full under LoRA, because the
                                 strategy made them (bigbird's extended position table)
    encode_tokens(backbone, documents)
                              -> one (T', H) tensor per document: the hidden state of every content token the
                                 strategy reads (its first T' <= T tokens; [CLS]/[SEP] left out), computed with the
                                 strategy's own attention (bigbird: block-sparse; recurrence: with its memory).
                                 Continued pretraining (longbert.training.pretrain) trains on it; a strategy without it
                                 is pretrained on plain consecutive windows of the backbone's positions

`adapt_backbone(backbone)` is called once when the model is built, before any weights are loaded into the
strategy: a strategy that changes how the backbone attends (block-sparse attention) or how far its positions
reach does it there; one that runs the backbone segment after segment with state (recurrence) keeps that state
inside `encode`. The model and the training loop only ever call these three methods.

Adding a strategy (one file here and five short edits; docs/strategies.md#adding-a-strategy says each step): a
config dataclass in configs.py (name, option fields, `problems`, and `ABSENT_MEANS` for every field added after models
were saved with it) with its line in configs.STRATEGIES, and a module with the three methods above, registered under
the same name with `register`; then an import in strategies/registry.py, tiny-backbone settings in tests/helpers.py,
its hooks in tests/strategies/test_strategies.py's DECLARED_HOOKS, a line in docs/architecture.md. Which of the
Protocols below it implements decides what else takes it: ReadsWindows -> `longbert export`, EncodesTokens ->
`longbert pretrain` through its own reading, HasUnitSpans -> explain's highlights.

Tensor dimension letters used in shape comments across the package:
    B  documents in a batch            T  tokens of one document (content tokens, no [CLS]/[SEP])
    W  windows (chunks) in one backbone pass, across documents
    N  units per document (chunks, windows, segments; 1 for a single-vector strategy)
    L  tokens in one window, with its [CLS]/[SEP] (padded to the longest window in the pass)
    H  hidden size of the backbone     C  number of classes
Block-sparse attention (bigbird) adds:
    A  attention heads                 D  size of one head (H / A)
    S  tokens in one attention block   G  blocks in one pass (L / S)
    Q  query blocks that attend sparsely (G minus the global blocks)
    K  key blocks each of them reads (global + window + random)   R  random blocks per query block
Segment recurrence (recurrence, rmt) adds, with A and D as above:
    M  memory slots carried from one segment to the next (tokens per layer, or memory tokens)
    E  documents still being read at one step of the recurrence (E <= B)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.configs import STRATEGIES, StrategyInfo, add_strategy


@dataclass
class SpecialTokens:
    """Ids taken from the tokenizer; no strategy hard-codes them."""

    cls_id: int
    sep_id: int
    pad_id: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialTokens":
        missing = [n for n in ("cls_token_id", "sep_token_id", "pad_token_id") if getattr(tokenizer, n) is None]
        if missing:
            raise LongbertError(f"the tokenizer has no {', '.join(missing)}; longbert needs a BERT-style tokenizer")
        return cls(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id)


@dataclass
class PassBudget:
    """How much goes through the backbone in one forward pass, so memory stays bounded. A limit left None follows
    the device the pass runs on (`on`): a CPU's or an accelerator's default."""

    max_windows: int | None = None
    max_tokens: int | None = None
    # A pass is padded to its longest window; a shorter window starts a new pass rather than push the pass's
    # padding past this share (chunking leaves one short remainder per document: padding it to 512 wastes work).
    max_padding: float | None = None

    def on(self, device: torch.device | str | None = None) -> "PassBudget":
        """This budget with every limit left None set to the default of `device` (None: the CPU's)."""
        defaults = CPU_PASSES if device is None or torch.device(device).type == "cpu" else ACCELERATOR_PASSES
        return PassBudget(*(defaults[i] if v is None else v
                            for i, v in enumerate((self.max_windows, self.max_tokens, self.max_padding))))


# The defaults of a pass's limits (windows, padded tokens, padding share) on a CPU and on an accelerator. On the 2-core
# CPU more, smaller passes cost less than padding does (benchmarks/bench_chunk.py; benchmarks/log.md, "Passes pad at
# most 2%"). On a GPU a pass of a few windows leaves it idle between kernel launches: passes there are as large as a
# batch of 512-token windows gets and may pad a quarter (benchmarks/bench_gpu_eval.py; benchmarks/log.md,
# "Evaluation at a GPU's speed").
CPU_PASSES = (64, 16384, 0.02)
ACCELERATOR_PASSES = (512, 262144, 0.25)


@dataclass
class Units:
    """What `encode` returns: a padded set of vectors per document."""

    vectors: torch.Tensor  # (B, N, H)
    mask: torch.Tensor  # (B, N) bool, True where a unit exists
    # (B, N) float: how many content tokens each unit adds to those of the units before it (a window overlapping its
    # predecessor adds only its new tokens); None where every unit counts the same. Mean pooling weighs by it.
    sizes: torch.Tensor | None = None


@dataclass
class Pooled:
    """What `pool` returns."""

    vector: torch.Tensor  # (B, H)
    weights: torch.Tensor | None = None  # (B, N): how much each unit weighed, when the pooler knows


@runtime_checkable
class Strategy(Protocol):
    """What every strategy module (an `nn.Module`) provides. See the module docstring."""

    config: Any

    def adapt_backbone(self, backbone: nn.Module) -> None: ...

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]) -> Units: ...

    def pool(self, units: Units) -> Pooled: ...


@runtime_checkable
class HasUnitSpans(Protocol):
    """A strategy that says which content tokens each of its units covers."""

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]: ...


@runtime_checkable
class ReadsWindows(Protocol):
    """A strategy that reads a document as independent windows, each pooled to one vector from its own token states
    alone (what an exported per-window graph can run: the backbone, then `window_vectors`)."""

    def windows(self, ids: torch.Tensor) -> tuple[list[torch.Tensor], list[float] | None]: ...

    def window_vectors(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor: ...


@runtime_checkable
class WeighsUnits(Protocol):
    """A strategy that pools several units and says whether the weights its pooling gives them follow their content
    (a strategy without this hook gives weights that do, or has one unit)."""

    def weights_carry_content(self) -> bool: ...


@runtime_checkable
class HasCheckpointState(Protocol):
    """A strategy with state outside its weights that a resumed run needs (bigbird's random-block generator)."""

    def checkpoint_state(self) -> dict[str, torch.Tensor]: ...

    def load_checkpoint_state(self, state: dict[str, torch.Tensor]) -> None: ...


@runtime_checkable
class EncodesTokens(Protocol):
    """A strategy that gives every content token's hidden state under its own attention (continued pretraining)."""

    def encode_tokens(self, backbone: nn.Module, documents: list[torch.Tensor]) -> list[torch.Tensor]: ...


@runtime_checkable
class SavesLoraModules(Protocol):
    """A strategy that made backbone modules which must train in full under LoRA (peft's modules_to_save)."""

    lora_modules_to_save: tuple[str, ...]


def unit_spans(strategy: nn.Module, length: int) -> list[list[tuple[int, int]]] | None:
    """Each unit's content-token ranges for a document of `length` tokens, or None when the strategy does not say."""
    if not isinstance(strategy, HasUnitSpans):
        return None
    return [[(int(a), int(b)) for a, b in unit] for unit in strategy.unit_spans(length)]


def lora_modules_to_save(strategy: nn.Module) -> tuple[str, ...]:
    """The backbone modules a strategy needs trained in full beside LoRA adapters (none for most)."""
    return tuple(strategy.lora_modules_to_save) if isinstance(strategy, SavesLoraModules) else ()


def spans_of_indices(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted token indices -> runs of consecutive ones: [0, 1, 2, 7, 8] -> [(0, 3), (7, 9)]."""
    spans: list[tuple[int, int]] = []
    for i in indices:
        if spans and spans[-1][1] == i:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


@dataclass(frozen=True)
class StrategyEntry:
    """A strategy's catalog entry (configs.StrategyInfo: name, config class, summary, role) with its module."""

    name: str
    config_cls: type
    module_cls: Callable[..., nn.Module]
    summary: str
    role: str | None = None  # "default", "reference" or None (configs.ROLES)


REGISTRY: dict[str, StrategyEntry] = {}


def register(name: str, config_cls: type | None = None, summary: str = "", role: str | None = None):
    """Class decorator: the module of strategy `name`. A built-in strategy's config class, summary and role are
    configs.STRATEGIES' (so that recipes load without torch); a strategy of one's own, in one file, passes them
    here, and is added to that catalog when its file is imported."""

    def wrap(module_cls):
        if name in REGISTRY:
            raise RuntimeError(f"strategy {name!r} registered twice")
        if config_cls is not None:
            add_strategy(StrategyInfo(name, config_cls, summary, role))
        info = STRATEGIES[name]
        REGISTRY[name] = StrategyEntry(name, info.config_cls, module_cls, info.summary, info.role)
        return module_cls

    return wrap


def config_fields(config_cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_cls) if f.name != "name"]
