"""Pretraining recipes (`longbert pretrain`): continued masked-language-model training on unlabelled text.
`PretrainRecipe` and its sections, and `load_pretrain_recipe`, validated as fine-tuning recipes are (see
longbert.config.loader); the backbone and evaluation sections are fine-tuning's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from longbert.config.loader import OVERRIDES, apply_overrides, plain_name_problems, problems_message
from longbert.config.lookup import find_recipe, read_recipe_file
from longbert.config.optimizer import (
    max_grad_norm_option,
    mixed_precision_option,
    optimiser_problems,
    weight_decay_option,
)
from longbert.config.recipe import BackboneConfig, EvalConfig, Recipe
from longbert.config.validation import RecipeCompletion, StrategyConfig, Validated, build
from longbert.errors import LongbertError
from longbert.utils.fields import option


@dataclass
class PretrainDataConfig(Validated):
    SECTION = "data"

    path: str = option("imdb", "hub dataset id, a data file, a folder of <split> files, or a name under the data root "
                       "(as data.path of a training recipe)")
    hub_config: str | None = option(None, "hub dataset configuration name (hub datasets only)")
    split: str = option("unsupervised", "the split of unlabelled documents (labels, if any, are ignored)")
    text_column: str = option("text", "column holding the document text")
    heldout_fraction: float = option(0.02, "share of the documents (seeded) kept out of training to measure the MLM "
                                     "loss on")
    min_tokens: int = option(0, "keep only documents of at least this many tokens ([CLS]/[SEP] included; 513: only "
                             "those a 512-position backbone cannot read at once)")
    max_train_documents: int | None = option(None, "seeded random subset of the training documents; null for all")
    max_heldout_documents: int | None = option(None, "seeded random subset of the held-out documents; null for all")
    max_document_tokens: int = option(16384, "per-document token cap (bigbird reads at most strategy.max_tokens - 2 "
                                      "anyway)")

    # What longbert.data.sources asks of a data section: the split to load, and class names (none: no labels here).
    @property
    def train_split(self) -> str:
        return self.split

    label_names = None

    def problems(self, path: str) -> list[str]:
        out = []
        if not 0 < self.heldout_fraction < 1:
            out.append(f"{path}.heldout_fraction must be between 0 and 1, got {self.heldout_fraction}")
        for name in ("max_train_documents", "max_heldout_documents"):
            value = getattr(self, name)
            if value is not None and value < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {value}")
        if self.min_tokens < 0:
            out.append(f"{path}.min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_document_tokens < 1:
            out.append(f"{path}.max_document_tokens must be >= 1, got {self.max_document_tokens}")
        return out


@dataclass
class MaskingConfig(Validated):
    SECTION = "masking"

    probability: float = option(0.15, "share of the (non-special) tokens chosen as prediction targets")
    mask_fraction: float = option(0.8, "share of the chosen tokens replaced by [MASK]")
    random_fraction: float = option(0.1, "share of the chosen tokens replaced by a random (non-special) token; the "
                                    "rest stay as they are")

    def problems(self, path: str) -> list[str]:
        out = []
        if not 0 < self.probability < 1:
            out.append(f"{path}.probability must be between 0 and 1, got {self.probability}")
        for name in ("mask_fraction", "random_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                out.append(f"{path}.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.mask_fraction + self.random_fraction > 1:
            out.append(f"{path}.mask_fraction + {path}.random_fraction must be <= 1, got "
                       f"{self.mask_fraction} + {self.random_fraction}")
        return out


@dataclass
class PretrainTrainConfig(Validated):
    SECTION = "train"

    steps: int = option(1000, "optimiser steps in all, head_steps included")
    head_steps: int = option(0, "the first steps train only the MLM head, the backbone unchanged: for a backbone "
                             "shipped without a trained head (minilm); the held-out loss after them is the 'before' "
                             "of the backbone")
    batch_size: int = option(8, "documents per batch (before accumulation)")
    gradient_accumulation: int = option(1, "batches whose gradients are summed before each optimiser step")
    learning_rate: float = option(5e-5, "peak AdamW learning rate of the backbone (warmup, then linear decay to 0 over "
                                  "the steps after head_steps)")
    head_learning_rate: float = option(1e-3, "peak AdamW learning rate of the MLM head (transform and bias; its "
                                       "decoder is the word embeddings, which train with the backbone)")
    weight_decay: float = weight_decay_option()
    warmup_ratio: float = option(0.06, "share of each learning rate's steps with linear warmup")
    max_grad_norm: float = max_grad_norm_option()
    mixed_precision: str = mixed_precision_option()
    checkpoint_every_steps: int = option(100, "write a resumable checkpoint every N optimiser steps")
    log_every_steps: int = option(10, "every N optimiser steps: print and record the mean training loss, learning rate "
                                  "and tokens/s")
    eval_every_steps: int | None = option(None, "also measure the held-out loss every N optimiser steps; null: only "
                                          "before and after")

    def problems(self, path: str) -> list[str]:
        out = []
        for name in ("steps", "batch_size", "gradient_accumulation", "checkpoint_every_steps", "log_every_steps"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every_steps is not None and self.eval_every_steps < 1:
            out.append(f"{path}.eval_every_steps must be >= 1 or null, got {self.eval_every_steps}")
        if not 0 <= self.head_steps < self.steps:
            out.append(f"{path}.head_steps must be >= 0 and < {path}.steps, got {self.head_steps} (steps {self.steps})")
        return out + optimiser_problems(self, path)


@dataclass
class PretrainRecipe(RecipeCompletion):
    name: str = option("pretrain", "run name; the run folder is output_dir")
    output_dir: str | None = option(None, "run folder (the backbone lands in <output_dir>/backbone); null means "
                                    "runs/<name>")
    seed: int = option(42, "seed for the held-out split, sampling, masking, initialisation and shuffling")
    data: PretrainDataConfig = option(None, "the unlabelled documents", default_factory=PretrainDataConfig)
    backbone: BackboneConfig = option(None, "the BERT-family encoder to train further", default_factory=BackboneConfig)
    strategy: StrategyConfig = option(None, "how the backbone reads a document (`name` picks one of `longbert "
                                      "strategies`); bigbird and recurrence are trained with their own attention, the "
                                      "others on plain windows")
    masking: MaskingConfig = option(None, "which tokens are predicted, and how they are hidden (BERT's 15%, "
                                    "80/10/10)", default_factory=MaskingConfig)
    train: PretrainTrainConfig = option(None, "optimisation", default_factory=PretrainTrainConfig)
    eval: EvalConfig = option(None, "held-out evaluation settings", default_factory=EvalConfig)

    def problems(self, path: str) -> list[str]:
        return plain_name_problems(self.name)



def pretrain_recipe_from_dict(raw: dict, source: str = "recipe",
                              overrides: list[str] | tuple[str, ...] = ()) -> PretrainRecipe:
    """A validated PretrainRecipe from plain data; one LongbertError naming every problem. A user's own fine-tuning
    recipe (no masking section, and valid as one) is refused with the command that runs it."""
    problems: list[str] = []
    recipe = build(PretrainRecipe, raw, "", problems)
    if problems and isinstance(raw, dict) and "masking" not in raw:
        as_training: list[str] = []
        build(Recipe, raw, "", as_training)
        if not as_training:
            raise LongbertError(f"{source} is a training recipe (it has no masking section): run it with "
                                f"`longbert train {source}`")
    if problems:
        raise LongbertError(problems_message(source, problems, overrides))
    return recipe


def load_pretrain_recipe(path: str | Path | None = None,
                         overrides: list[str] | tuple[str, ...] = ()) -> PretrainRecipe:
    """`load_recipe` for `longbert pretrain`: a YAML pretraining recipe (a file, or the bare name of a packaged one
    such as "imdb_cpu", or by its former name "pretrain_imdb_cpu"), `key.path=value` overrides, validated into a
    PretrainRecipe; one LongbertError naming every problem with its YAML path."""
    raw: dict = {}
    source = OVERRIDES
    if path is not None:
        path = find_recipe(path, "pretrain")
        raw, source = read_recipe_file(path, "pretrain"), str(path)
    return pretrain_recipe_from_dict(apply_overrides(raw, list(overrides)), source, overrides)
