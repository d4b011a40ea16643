"""Starting accelerate for a training run, and the trackers (tensorboard, wandb, mlflow) it may send the log to.
accelerate does device placement, mixed precision, distribution and gradient accumulation for both loops."""

from __future__ import annotations

from pathlib import Path

import accelerate.utils
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

from longbert.errors import LongbertError
from longbert.utils.hardware import resolve_precision


def start_accelerator(mixed_precision: str, gradient_accumulation: int, tracker: str | None = None,
                      project_dir: Path | None = None):
    """(an Accelerator for one run, the precision it resolved `mixed_precision` to). It accumulates gradients over
    `gradient_accumulation` batches (`accelerator.accumulate`) and logs to `tracker` (None: no tracker)."""
    precision = resolve_precision(mixed_precision, "cuda" if torch.cuda.is_available() else "cpu")
    # accelerate keeps its settings in a process-wide singleton; a second run in the same process (a notebook, or
    # `compare`) may ask for another precision, so clear the per-run part (never the process group).
    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=gradient_accumulation,
                              log_with=tracker, project_dir=project_dir)
    return accelerator, precision


def check_tracker(report_to: str) -> None:
    """Raise one LongbertError, before anything runs, when `train.report_to` names a tracker that is not installed."""
    checks = accelerate.utils  # looked up now, so that what the process has installed is what is asked
    available = {"none": lambda: True, "tensorboard": checks.is_tensorboard_available,
                 "wandb": checks.is_wandb_available, "mlflow": checks.is_mlflow_available}[report_to]
    if not available():
        raise LongbertError(f"train.report_to={report_to}: the {report_to} package is not installed "
                            f"(pip install {report_to}), or set train.report_to=none")


def tracker_config(recipe) -> dict:
    """The recipe flattened to `section/key: value` scalars, as trackers take hyperparameters."""
    flat = {}

    def walk(node, prefix):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}/")
            else:
                flat[prefix + key] = value if isinstance(value, (int, float, str, bool)) else str(value)

    walk(recipe.to_dict(), "")
    return flat
