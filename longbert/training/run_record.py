"""`RunMetrics`: what a fine-tuning run's metrics.json holds, the record that training writes and that compare, the
stages before a run (head stage, self-training), the training curves and `longbert train`'s summary read. One writer
(`write_run_metrics`) and one reader (`read_run_metrics`, which loads the files of earlier versions too: a key they
lack is None, a key this version does not know is ignored).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from longbert.errors import LongbertError
from longbert.result import Result
from longbert.utils.atomic import json_text, write_text_atomically
from longbert.utils.folders import METRICS_FILE, RunFolder


@dataclass(kw_only=True)
class RunMetrics:
    """A run's record, in metrics.json's order. The training log and validation history are lists of
    {step, ...} entries; `test` is `evaluation.metrics.compute_metrics`'s dict with the pass's speed."""

    recipe: str
    strategy: str
    strategy_settings: dict | None = None  # as the model was built (token_pooling's auto resolved); older: absent
    command: str | None = None
    init_from: dict | None = None  # the weights the run started from (train.init_from, a stage before it)
    machine: dict
    mixed_precision: str | None = None
    data: dict  # documents, tokens and classes of each split
    label_names: list[str]
    trainable_parameters: int
    train_seconds: float  # the whole recipe's training: cached units and the stages before the run included
    contrastive_stage: dict | None = None  # what each stage before the run did
    self_training: dict | None = None
    head_stage: dict | None = None
    steps: int
    best_step: int | None
    best_validation: float | None
    best_metric: str
    stopped_early_at_step: int | None = None
    train_log: list[dict]
    validation_history: list[dict]
    thresholds: list[float] | None = None  # multi-label: the kept model's decision thresholds
    calibration: dict | None = None  # the kept model's calibration, fitted on validation (Calibration.to_dict)
    reading: dict | None = None  # how the end-to-end stage read (train.reading): tokens with and without gradient
    test: dict | None = None  # the kept model on the test split, when the data has one

    def to_dict(self) -> dict:
        """The record as metrics.json holds it: the stages, starting weights, thresholds and test metrics a run lacks
        left out."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None or k not in ABSENT_WHEN_NONE}

    @classmethod
    def from_dict(cls, metrics: dict, where: str = METRICS_FILE) -> RunMetrics:
        """A record read from a metrics.json of any version (see the module's docstring); `where` names the file in
        the error that says which keys a file lacks."""
        missing = [k for k in REQUIRED if k not in metrics]
        if missing:
            raise LongbertError(f"{where} is not a run's metrics (no {', '.join(missing)})")
        return cls(**{k: metrics.get(k) for k in FIELDS})


FIELDS = tuple(f.name for f in dataclasses.fields(RunMetrics))
REQUIRED = tuple(f.name for f in dataclasses.fields(RunMetrics) if f.default is dataclasses.MISSING)
ABSENT_WHEN_NONE = ("init_from", "contrastive_stage", "self_training", "head_stage", "thresholds", "calibration",
                    "reading", "test")


@dataclass(frozen=True)
class TrainResult(Result):
    """What `longbert.train` returns: `classifier`, the kept model itself (a LongDocumentClassifier in memory,
    calibrated as saved: `result.classifier.predict(texts)` reads nothing from disk); `folder`, the run folder;
    `metrics`, what its metrics.json holds (a dict); `model`, where the kept model is saved (<run folder>/best); and
    `record`, the same metrics typed."""

    record: RunMetrics = field(kw_only=True)
    classifier: Any = field(default=None, kw_only=True, repr=False, compare=False)  # None: read from a folder

    @classmethod
    def from_run(cls, folder: Path, record: RunMetrics, classifier=None) -> TrainResult:
        """The result of the run in `folder` whose metrics.json holds `record`; `classifier`: its kept model, where
        the run has it in memory."""
        return cls(Path(folder), record.to_dict(), RunFolder(folder).best, record=record, classifier=classifier)


def write_run_metrics(run_dir: Path, record: RunMetrics) -> None:
    """Write `record` as run_dir/metrics.json, atomically."""
    write_text_atomically(RunFolder(run_dir).metrics, json_text(record.to_dict(), RunFolder(run_dir).metrics, indent=2))


def read_run_metrics(run_dir: Path) -> RunMetrics:
    """The record in run_dir/metrics.json; a LongbertError names a file that is not JSON or not a run's metrics."""
    path = RunFolder(run_dir).metrics
    try:
        metrics: Any = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise LongbertError(f"{path} is not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(metrics, dict):
        raise LongbertError(f"{path} is not a run's metrics (not a JSON object)")
    return RunMetrics.from_dict(metrics, str(path))
