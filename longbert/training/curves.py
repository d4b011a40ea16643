"""A run's own picture: its training loss and its validation metric against the optimisation step, written as a PNG
beside metrics.md (which links it), so that a person sees at a glance whether a run learned, stalled or overfitted,
and which step was kept."""

from __future__ import annotations

import io
from pathlib import Path

from longbert.training.run_record import RunMetrics
from longbert.utils.atomic import write_bytes_atomically


def write_training_curves(record: RunMetrics, path: Path) -> bool:
    """Draw metrics.json's `train_log` (mean training loss between logs) and `validation_history` (the kept metric,
    `best_metric`, at each evaluation; the kept step starred) into `path`. False, and nothing written, when the run
    logged neither (a run too short to log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = [(e["step"], e["loss"]) for e in record.train_log or [] if e.get("loss") is not None]
    metric = record.best_metric
    scores = [(e["step"], e[metric]) for e in record.validation_history or [] if e.get(metric) is not None]
    if not losses and not scores:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, points, label in ((left, losses, "training loss (mean since the last log)"),
                              (right, scores, f"validation {metric}")):
        if points:
            ax.plot(*zip(*points), "o-" if len(points) <= 30 else "-", markersize=4)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_xlabel("optimisation step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    kept = [(step, value) for step, value in scores if step == record.best_step]
    if kept:
        right.plot(*kept[0], "*", markersize=14, color="tab:orange", label=f"kept (step {kept[0][0]})")
        right.legend(fontsize="small")
    fig.suptitle(f"{record.recipe}: {record.strategy}", fontsize="medium")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomically(path, buffer.getvalue())
    return True
