"""Every name longbert gives a file or folder it writes, in one leaf: a run folder, a model folder, an exported
folder and a report folder. `RunFolder(path)` reads a run folder by those names.

    run = RunFolder("runs/imdb_sliding")
    run.best                       # runs/imdb_sliding/best: the kept model
    run.recipe                     # runs/imdb_sliding/recipe.yaml
    run.predictions("validation")  # runs/imdb_sliding/predictions-validation.jsonl

It imports nothing from longbert, so that every room can name a file without importing the room that writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# A run folder (`longbert train`, `longbert pretrain`): what training writes into output_dir.
RECIPE_FILE = "recipe.yaml"  # the recipe the run was trained with, overrides applied
BEST = "best"  # the kept model: a model folder, read wherever a run folder means a model
CHECKPOINT = "checkpoint"  # the last checkpoint, kept when the run finishes (`--resume` reads it)
STATE_FILE = "state.json"  # in the checkpoint: the loop's counters and the recipe's fingerprint
CHECKPOINT_MODEL = "model.safetensors"  # in the checkpoint: the trainable weights at its step
CHECKPOINT_BEST = "best.safetensors"  # the kept weights so far
CHECKPOINT_STRATEGY = "strategy.safetensors"  # a strategy's own state (strategies with checkpoint_state)
CHECKPOINT_OPTIMIZER = "optimizer.safetensors"  # the optimiser's tensors ...
CHECKPOINT_OPTIMIZER_STATE = "optimizer.json"  # ... and the rest of its state and the scheduler's
CHECKPOINT_READING = "reading.safetensors"  # train.reading's unit cache
CHECKPOINT_START = "start.safetensors"  # the weights a stage started from that an earlier stage of the run trained
METRICS_FILE = "metrics.json"  # the run's record (training/run_record.py)
METRICS_PAGE = "metrics.md"  # the same record as a page to read
CURVES_FILE = "training-curves.png"
SPLIT_FILE = "data-split.json"  # how a single data file was cut into train, validation and test
TRACKER_LOGS = "logs"  # what a tracker (train.report_to) writes; tensorboard's event files
PRETRAINED_BACKBONE = "backbone"  # the encoder a pretraining run writes
HEAD_STAGE = "head_stage"  # train.head_first: the pooler and head trained on the frozen backbone first
START = "start"  # train(model=...): the model given, saved as the run's start (train.init_from names it)
CONTRASTIVE_STAGE = "contrastive_stage"  # train.contrastive_pairs: the backbone tuned on pairs first
CONTRASTIVE_SUMMARY = "contrastive.json"  # in CONTRASTIVE_STAGE: what the stage did, written last
SELF_TRAINING = "self_training"  # train.self_training_documents: the teacher and its pseudo-labels
PSEUDO_FILE = "pseudo-labels.jsonl"  # in SELF_TRAINING: {"text", "label", "label_name", "confidence"} a line
SELF_TRAINING_SUMMARY = "self-training.json"  # beside it, written last: what the teacher labelled and kept
HYBRID = "hybrid"  # `longbert hybrid`'s folder under a run, and the row's name in compare's reports
HYBRID_SUMMARY = "hybrid.json"  # in a hybrid folder


def predictions_file(split: str) -> str:
    """One prediction row per document of `split` (or of an evaluation's name: `test-with-overrides`)."""
    return f"predictions-{split}.jsonl"


def metrics_file(name: str, suffix: str = "json") -> str:
    """An evaluation's metrics: metrics-<name>.json and metrics-<name>.md."""
    return f"metrics-{name}.{suffix}"


CONFUSION_PREFIX, RELIABILITY_PREFIX = "confusion-matrix", "reliability-diagram"
RUN_CONFUSION_FILE = f"{CONFUSION_PREFIX}.png"  # a run's test page's (metrics.md): no evaluation name


def confusion_file(name: str) -> str:
    return f"{CONFUSION_PREFIX}-{name}.png"


def reliability_beside(confusion_path: str | Path) -> Path:
    """Where a page's reliability diagram goes: beside its confusion matrix, named as it is
    (confusion-matrix-test.png -> reliability-diagram-test.png; confusion-matrix.png -> reliability-diagram.png)."""
    confusion_path = Path(confusion_path)
    if not confusion_path.name.startswith(CONFUSION_PREFIX):
        raise ValueError(f"{confusion_path} is not named as a confusion matrix ({CONFUSION_PREFIX}*)")
    return confusion_path.with_name(RELIABILITY_PREFIX + confusion_path.name[len(CONFUSION_PREFIX):])


# What a run writes into its folder; a folder holding anything else is not cleared to start a run again.
RUN_ENTRIES = (RECIPE_FILE, CHECKPOINT, BEST, "metrics*.json", "metrics*.md", "predictions-*.jsonl",
               f"{CONFUSION_PREFIX}*.png", f"{RELIABILITY_PREFIX}*.png", CURVES_FILE, SPLIT_FILE, TRACKER_LOGS,
               PRETRAINED_BACKBONE, HEAD_STAGE, CONTRASTIVE_STAGE, SELF_TRAINING, START)

# A model folder (`best/`, an ensemble, a hybrid): what `from_pretrained` reads.
CONFIG_FILE = "longbert_config.json"  # the model's settings (modeling/settings.py)
# transformers' own config file (transformers.utils.CONFIG_NAME), named here so that reading a name loads no
# transformers; a test holds the two equal.
TRANSFORMERS_CONFIG = "config.json"
HEAD_FILE = "head.safetensors"
BACKBONE_DIR = "backbone"
ADAPTER_DIR = "adapter"
CARD_FILE = "README.md"  # the model card
FACTS_FILE = "training.json"  # the facts the card is written from
MEMBERS_DIR = "members"  # an ensemble's member models
ENSEMBLE_FILE = "ensemble.json"  # an ensemble's members and how their probabilities are combined
LEXICAL_WEIGHTS = "lexical.safetensors"  # a model's lexical half (modeling/lexical.py): its weights ...
LEXICAL_CONFIG = "lexical.json"  # ... and its vocabulary and settings
LEXICAL_DIR = "ensemble_lexical"  # an ensemble's lexical member (not its first member's own lexical half)
ENSEMBLE_SUMMARY = "ensemble-summary.json"  # beside an ensemble's model files: how its members were chosen

# An exported folder (`longbert export`).
EXPORT_FILE = "export.json"
ONNX_HEAD_FILE = "head.onnx"
PARITY_FILE = "parity.json"

# A report folder (`longbert compare`, `--train-sizes`).
RESULTS_FILE = "results.json"  # every number of the report; what says a folder is an earlier report
REPORT_FILES = ("report.md", "report.html")
# The file each plot is written to beside report.md (report.html embeds the same bytes).
REPORT_PLOTS = {
    "accuracy_by_length": "accuracy-by-length.png",
    "speed_by_length": "speed-by-length.png",
    "confusion_matrices": "confusion-matrices.png",
    "reliability": "reliability-diagram.png",
    "coverage": "coverage-curve.png",
}
BASELINE_FILE = "tfidf-baseline.json"
SPEED_FILE = "speed-by-length.json"
CURVE_FILE = "curve.json"  # in a learning-curve folder: what says a folder is an earlier curve
CURVE_PLOT = "curve.png"


@dataclass(frozen=True)
class RunFolder:
    """A run folder, by the names above. It reads nothing when made: each property is a path."""

    path: Path

    def __init__(self, path: str | Path):
        object.__setattr__(self, "path", Path(path))

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def recipe(self) -> Path:
        return self.path / RECIPE_FILE

    @property
    def checkpoint(self) -> Path:
        return self.path / CHECKPOINT

    @property
    def metrics(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def hybrid(self) -> Path:
        return self.path / HYBRID

    def predictions(self, split: str) -> Path:
        return self.path / predictions_file(split)

    def stage(self, name: str) -> RunFolder:
        """A stage's own run folder inside this one (HEAD_STAGE, CONTRASTIVE_STAGE, SELF_TRAINING)."""
        return RunFolder(self.path / name)

    def is_run(self) -> bool:
        """A finished or started run: its recipe is there."""
        return self.recipe.is_file()

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)
