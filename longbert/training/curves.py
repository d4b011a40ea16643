"""A run's own picture: its training loss and its validation metric against the optimisation step, written as a PNG
beside metrics.md (which links it), so that a person sees at a glance whether a run learned, stalled or overfitted,
and which step was kept. What is drawn is read from metrics.json here; evaluation/plots.py draws it."""

from __future__ import annotations

from pathlib import Path

from longbert.evaluation.plots import training_curves_png
from longbert.training.run_record import RunMetrics
from longbert.utils.atomic import write_bytes_atomically


def write_training_curves(record: RunMetrics, path: Path) -> bool:
    """Draw metrics.json's `train_log` (mean training loss between logs) and `validation_history` (the kept metric,
    `best_metric`, at each evaluation; the kept step starred) into `path`. False, and nothing written, when the run
    logged neither (a run too short to log)."""
    losses = [(e["step"], e["loss"]) for e in record.train_log or [] if e.get("loss") is not None]
    metric = record.best_metric
    scores = [(e["step"], e[metric]) for e in record.validation_history or [] if e.get(metric) is not None]
    if not losses and not scores:
        return False
    png = training_curves_png(losses, scores, metric, record.best_step, f"{record.recipe}: {record.strategy}")
    write_bytes_atomically(path, png)
    return True
