"""Every strategy's settings, without torch: the config dataclass of each strategy, the vocabularies they accept, and
the catalog that names them (`STRATEGIES`: each name's config class, one-line summary and role). A recipe, the
`longbert strategies` listing and a saved model's settings need only this module; a strategy's code (its nn.Module,
in the file named after it) loads when a model is built, and registers itself under the same name (base.register).

Each config checks itself when built in Python, as every section of a recipe does (longbert.utils.checked):

    ChunkConfig(window=0)   # LongbertError: recipe: strategy.window must be >= 1, got 0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from longbert.errors import LongbertError
from longbert.utils.checked import Validated
from longbert.utils.fields import one_of, option

TOKEN_POOLINGS = ("cls", "mean")
# What a strategy's `token_pooling` setting accepts: `auto` is resolved when the model is built, from the backbone's
# own pooling config (`backbone.backbone_token_pooling`), and the saved model records what it became.
TOKEN_POOLING_SETTINGS = ("auto", *TOKEN_POOLINGS)
UNIT_WEIGHTS = ("new_tokens", "equal")
UNIT_POOLINGS = ("mean", "max", "attention", "gated", "vote", "transformer")
SEGMENT_POOLINGS = ("last", *UNIT_POOLINGS)
POSITION_SCHEMES = ("copy", "interpolate")  # bigbird's positions past the learned ones (strategies/positions.py)
TRUNCATE_MODES = ("head", "tail", "head_tail")
DISTANCE_BIAS_INIT = -3.0  # recurrence's distance bias at the start: memory gets a small share of attention


class StrategySettings(Validated):
    """What every strategy config is: checked when built, its problems named under `strategy` as in a recipe."""

    SECTION: ClassVar[str] = "strategy"


def pooling_problems(config, path: str) -> list[str]:
    """What is wrong with the pooling settings a window strategy's config shares (chunk's and sliding's)."""
    return (one_of(f"{path}.pooling", config.pooling, UNIT_POOLINGS)
            + one_of(f"{path}.token_pooling", config.token_pooling, TOKEN_POOLING_SETTINGS)
            + one_of(f"{path}.unit_weights", config.unit_weights, UNIT_WEIGHTS))


def segment_problems(config, path: str) -> list[str]:
    """Checks shared by `recurrence` and `rmt`."""
    out = []
    if config.segment < 1:
        out.append(f"{path}.segment must be >= 1, got {config.segment}")
    if config.backprop_segments is not None and config.backprop_segments < 0:
        out.append(f"{path}.backprop_segments must be >= 0 or null, got {config.backprop_segments}")
    out += one_of(f"{path}.pooling", config.pooling, SEGMENT_POOLINGS)
    out += one_of(f"{path}.token_pooling", config.token_pooling, TOKEN_POOLING_SETTINGS)
    return out


@dataclass
class TruncateConfig(StrategySettings):
    name: str = "truncate"
    mode: str = option("head_tail", "which tokens to keep: head, tail or head_tail")
    max_tokens: int = option(510, "content tokens kept per document ([CLS]/[SEP] come on top)")
    head_tokens: int = option(128, "with head_tail: tokens from the start; the rest of max_tokens come from the end")
    token_pooling: str = option("auto", "document vector from the window: cls ([CLS] state), mean (token mean), or "
                                        "auto: what the backbone's pooling config says")

    def problems(self, path: str) -> list[str]:
        out = one_of(f"{path}.mode", self.mode, TRUNCATE_MODES)
        if self.max_tokens < 1:
            out.append(f"{path}.max_tokens must be >= 1, got {self.max_tokens}")
        if self.mode == "head_tail" and not 0 <= self.head_tokens <= self.max_tokens:
            out.append(f"{path}.head_tokens must be between 0 and max_tokens, got {self.head_tokens} > "
                       f"{self.max_tokens}")
        out += one_of(f"{path}.token_pooling", self.token_pooling, TOKEN_POOLING_SETTINGS)
        return out


@dataclass
class ChunkConfig(StrategySettings):
    name: str = "chunk"
    window: int = option(510, "content tokens per chunk ([CLS]/[SEP] come on top)")
    pooling: str = option("vote", "how chunk vectors become the document vector: mean, max, attention, gated, vote "
                                  "(attention's weights over each chunk's bounded vote) or transformer")
    token_pooling: str = option("auto", "chunk vector: cls ([CLS] state), mean (mean of token states), or auto: what "
                                        "the backbone's own pooling config says (mean for sentence-transformers "
                                        "models that mean-pool, cls otherwise)")
    unit_weights: str = option("new_tokens", "how mean pooling weighs the chunks: new_tokens (by the tokens each "
                                             "adds to those before it, so a short tail counts little) or equal")

    # What a key missing from a model saved before the key existed means (see ModelSettings.from_dict).
    ABSENT_MEANS = {"unit_weights": "equal"}

    @property
    def stride(self) -> int:
        """A chunk starts where the previous one ended. (A property, not a field: a recipe cannot set it, and saved
        settings do not hold it.)"""
        return self.window

    def problems(self, path: str) -> list[str]:
        out = [f"{path}.window must be >= 1, got {self.window}"] if self.window < 1 else []
        return out + pooling_problems(self, path)


@dataclass
class SlidingConfig(StrategySettings):
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


@dataclass
class BigBirdConfig(StrategySettings):
    name: str = "bigbird"
    max_tokens: int = option(4096, "tokens read per document, with [CLS]/[SEP] (a multiple of block_size); longer "
                                   "documents keep their head")
    block_size: int = option(64, "tokens per attention block")
    window_blocks: int = option(3, "neighbouring blocks each query block reads, itself in the middle (odd)")
    global_blocks: int = option(2, "leading blocks (holding [CLS]) that read, and are read by, every block")
    random_blocks: int = option(3, "extra blocks each query block reads in training, drawn at random (seeded); none "
                                   "at evaluation")
    random_seed: int = option(0, "seed of the generator that draws the random blocks")
    full_attention_up_to: int = option(512, "documents of at most this many tokens (with [CLS]/[SEP]) use full "
                                            "attention; 0: always block-sparse")
    token_pooling: str = option("auto", "document vector: cls ([CLS] state), mean (mean of token states), or auto: "
                                        "what the backbone's pooling config says")
    position_scheme: str = option("copy", "how positions past the backbone's learned ones start: copy (p gets p mod "
                                          "512, as Longformer) or interpolate (they walk the learned table once, "
                                          "interpolating)")
    unit_tokens: int = option(0, "0: the document is one unit (its token states pooled by token_pooling); k: every "
                                 "k consecutive content tokens' states, averaged, are one unit, pooled by pooling")
    pooling: str = option("mean", "with unit_tokens > 0, how span vectors become the document vector: mean, max, "
                                  "attention, gated, vote or transformer")
    global_bias: float | None = option(None, "null: global and local tokens read each other as any two keys; a "
                                             "number: a learned attention bias per layer and head, starting there, on "
                                             "every score between a global and a non-global token (e.g. -3: each "
                                             "block starts reading mostly its own window)")

    # What a key missing from a model saved before the key existed means (see ModelSettings.from_dict).
    ABSENT_MEANS = {"position_scheme": "copy", "unit_tokens": 0, "pooling": "mean"}

    def problems(self, path: str) -> list[str]:
        out = one_of(f"{path}.position_scheme", self.position_scheme, POSITION_SCHEMES)
        out += one_of(f"{path}.pooling", self.pooling, UNIT_POOLINGS)
        if self.unit_tokens < 0:
            out.append(f"{path}.unit_tokens must be >= 0 (0: one unit per document), got {self.unit_tokens}")
        for name in ("block_size", "window_blocks", "global_blocks"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        if self.window_blocks >= 1 and self.window_blocks % 2 == 0:
            out.append(f"{path}.window_blocks must be odd (the query block sits in the middle), got "
                       f"{self.window_blocks}")
        if self.random_blocks < 0:
            out.append(f"{path}.random_blocks must be >= 0, got {self.random_blocks}")
        if self.block_size >= 1 and self.global_blocks >= 1:
            smallest = (self.global_blocks + 1) * self.block_size
            if self.max_tokens < smallest:
                out.append(f"{path}.max_tokens must hold the global blocks and one more block "
                           f"(>= {smallest} with block_size {self.block_size}), got {self.max_tokens}")
            elif self.max_tokens % self.block_size:
                out.append(f"{path}.max_tokens must be a multiple of {path}.block_size, "
                           f"got {self.max_tokens} % {self.block_size} = {self.max_tokens % self.block_size}")
        if not 0 <= self.full_attention_up_to <= self.max_tokens:
            out.append(f"{path}.full_attention_up_to must be between 0 and {path}.max_tokens, "
                       f"got {self.full_attention_up_to} (max_tokens {self.max_tokens})")
        out += one_of(f"{path}.token_pooling", self.token_pooling, TOKEN_POOLING_SETTINGS)
        if self.global_bias is not None and not math.isfinite(self.global_bias):
            out.append(f"{path}.global_bias must be a finite number or null, got {self.global_bias}")
        return out


@dataclass
class RecurrenceConfig(StrategySettings):
    name: str = "recurrence"
    segment: int = option(510, "content tokens per segment ([CLS]/[SEP] come on top); each segment is one unit")
    memory: int = option(512, "memory per layer, in tokens: keys/values of the latest tokens of earlier segments "
                              "that each segment also attends to; 0 = independent segments")
    memory_segments: int = option(1, "how many earlier segments the memory spans; older tokens leave it")
    backprop_segments: int | None = option(0, "segment boundaries gradients cross through the memory: 0 stops them "
                                              "(Transformer-XL), null = the whole document")
    distance_bias: bool = option(True, f"learned attention bias on memory keys by their true token distance to the "
                                       f"query, per layer and head, in T5-style buckets; starts at "
                                       f"{DISTANCE_BIAS_INIT:g} so an untrained model reads each segment close to how "
                                       f"the backbone reads it alone")
    memory_bias: bool = option(False, "learned attention bias on memory keys per layer, head and segment age (zero at "
                                      "start)")

    # What a key missing from a model saved before the key existed means (see ModelSettings.from_dict).
    ABSENT_MEANS = {"distance_bias": False}
    pooling: str = option("mean", "document vector from segment vectors: last, mean, max, attention, gated, vote or "
                                  "transformer")
    token_pooling: str = option("auto", "segment vector: cls ([CLS] state), mean (mean of token states), or auto: "
                                        "what the backbone's pooling config says")

    def problems(self, path: str) -> list[str]:
        out = segment_problems(self, path)
        if self.memory < 0:
            out.append(f"{path}.memory must be >= 0, got {self.memory}")
        if self.memory_segments < 1:
            out.append(f"{path}.memory_segments must be >= 1, got {self.memory_segments}")
        elif self.memory > self.memory_segments * (self.segment + 2) and self.segment >= 1:
            out.append(
                f"{path}.memory must be <= memory_segments * (segment + 2) = "
                f"{self.memory_segments * (self.segment + 2)} (what {self.memory_segments} segment(s) can fill), got "
                f"{self.memory}; raise memory_segments or lower memory"
            )
        return out


@dataclass
class RmtConfig(StrategySettings):
    name: str = "rmt"
    segment: int = option(500, "content tokens per segment; [CLS], the memory tokens and [SEP] come on top")
    memory_tokens: int = option(10, "memory tokens read and written by every segment and passed to the next; 0 = "
                                    "independent segments")
    backprop_segments: int | None = option(None, "segment boundaries gradients cross through the memory: null = the "
                                                 "whole document (RMT), 0 stops them")
    pooling: str = option("last", "document vector from segment vectors: last, mean, max, attention, gated, vote or "
                                  "transformer")
    token_pooling: str = option("auto", "segment vector: cls ([CLS] state), mean (mean of the segment's token states, "
                                        "memory tokens left out), or auto: what the backbone's pooling config says")

    def problems(self, path: str) -> list[str]:
        out = segment_problems(self, path)
        if self.memory_tokens < 0:
            out.append(f"{path}.memory_tokens must be >= 0, got {self.memory_tokens}")
        return out


# --------------------------------------------------------------------------------------------------------------
# The catalog


@dataclass(frozen=True)
class StrategyInfo:
    """A strategy as a recipe and `longbert strategies` know it: its name, config class, one-line summary and role
    ("default": what a recipe without strategy.name gets; "reference": the baseline every comparison measures the
    others against; at most one strategy holds each)."""

    name: str
    config_cls: type
    summary: str
    role: str | None = None


ROLES = ("default", "reference")
STRATEGIES = {info.name: info for info in (
    StrategyInfo("bigbird", BigBirdConfig, "the whole document in one pass with BigBird block-sparse attention "
                 "(window + global + random blocks)"),
    StrategyInfo("chunk", ChunkConfig, "consecutive chunks of the whole document, chunk vectors pooled "
                 "(mean/max/attention/transformer)", role="default"),
    StrategyInfo("recurrence", RecurrenceConfig, "segments read in order with a Transformer-XL memory of earlier "
                 "segments' keys/values at every layer"),
    StrategyInfo("rmt", RmtConfig, "segments read in order, passing a few learned memory tokens from each segment to "
                 "the next (RMT)"),
    StrategyInfo("sliding", SlidingConfig, "overlapping windows (window, stride) over the whole document, pooled like "
                 "chunk"),
    StrategyInfo("truncate", TruncateConfig, "one window: the head, the tail, or head+tail (Sun et al. 2019) of each "
                 "document", role="reference"),
)}


def add_strategy(info: StrategyInfo) -> None:
    """Put a strategy of one's own in the catalog (base.register does, for a strategy whose config is in its file)."""
    if info.name in STRATEGIES:
        raise RuntimeError(f"strategy {info.name!r} is in the catalog already")
    if info.role is not None and (info.role not in ROLES or any(i.role == info.role for i in STRATEGIES.values())):
        raise RuntimeError(f"strategy {info.name!r}: role {info.role!r} is not one of {ROLES} or is taken")
    STRATEGIES[info.name] = info


def strategy_names() -> list[str]:
    return sorted(STRATEGIES)


def strategy_info(name: str) -> StrategyInfo:
    """The catalog's entry for `name`, or a LongbertError listing the valid names."""
    if name not in STRATEGIES:
        raise LongbertError(f"unknown strategy {name!r}; valid strategies: {', '.join(strategy_names())}")
    return STRATEGIES[name]


def config_class(name: str) -> type:
    """The config dataclass of strategy `name` (a LongbertError listing the valid names for another)."""
    return strategy_info(name).config_cls


def strategy_with_role(role: str) -> str:
    """The name of the strategy with `role` ("default" or "reference")."""
    names = [info.name for info in STRATEGIES.values() if info.role == role]
    if len(names) != 1:
        raise RuntimeError(f"exactly one strategy must hold role {role!r}, found {names}")
    return names[0]
