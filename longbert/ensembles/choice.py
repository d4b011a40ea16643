"""An ensemble's members chosen on the validation split, never on the test split: each run's kept
predictions-validation.jsonl (written by its kept model) scored alone (`score_rows`) or averaged with others'
(`averaged`, `score`), by the recipe's best_metric (loss, which a hard prediction has not, falls back to macro_f1).
Every group of two or more runs is scored up to EXHAUSTIVE_UP_TO runs; past it, groups are grown by forward
selection. `longbert ensemble` (ensemble_folder.py) and compare's rows (comparison/combined.py) choose alike.

Single-label only: averaged multi-label probabilities would need thresholds of their own, tuned on validation."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
from sklearn.metrics import f1_score

from longbert.evaluation.metrics import compute_metrics
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows
from longbert.modeling.calibration import Calibration, fit_calibration
from longbert.utils.folders import predictions_file

VALIDATION_FILE = predictions_file("validation")
SELECTION_METRICS = ("accuracy", "macro_f1")  # best_metric values an ensemble can be chosen by; loss falls back


def read_kept(run_dir: Path, name: str) -> list[PredictionRow] | None:
    """The rows of a run folder's kept prediction file `name` (predictions-<split>.jsonl), or None when it has none."""
    path = Path(run_dir) / name
    return read_prediction_rows(path) if path.is_file() else None


def read_validation(run_dir: Path) -> list[PredictionRow] | None:
    """A run folder's validation prediction rows, or None for a run that has none (trained before they were kept)."""
    return read_kept(run_dir, VALIDATION_FILE)


def selection_metric(best_metric: str) -> str:
    """The metric a combined row (ensemble, seeds, the model to deploy) is chosen by: the recipe's best_metric, or
    macro_f1 where that is loss, which a hard prediction has not."""
    return best_metric if best_metric in SELECTION_METRICS else "macro_f1"


def validation_of(run_dirs: dict[str, Path], metric: str, row: str) -> tuple[dict | None, str, str | None]:
    """(each run's validation rows, the metric a combined row is chosen by, None), or (None, metric, why `row` cannot
    be chosen) when a run kept no validation predictions. `metric`: the recipe's best_metric; loss, which a hard
    prediction has not, falls back to macro_f1."""
    metric = selection_metric(metric)
    validation = {s: read_validation(d) for s, d in run_dirs.items()}
    missing = [s for s, rows in validation.items() if rows is None]
    if missing:
        return None, metric, (f"no {row} row: {', '.join(missing)} kept no validation predictions "
                              f"({VALIDATION_FILE}; runs trained before they were kept): train them again to have one")
    return validation, metric, None


def score(rows: list[PredictionRow], probabilities: np.ndarray, metric: str) -> float:
    """Accuracy or macro-F1 of argmax(probabilities) against the rows' labels."""
    truth = np.array([r.label for r in rows])
    predicted = probabilities.argmax(1)
    if metric == "accuracy":
        return float((predicted == truth).mean())
    return float(f1_score(truth, predicted, labels=list(range(probabilities.shape[1])), average="macro",
                          zero_division=0))


def score_rows(rows: list[PredictionRow], metric: str) -> float:
    """Accuracy or macro-F1 of one run's prediction rows (their own probabilities)."""
    return score(rows, np.array([r.probabilities for r in rows]), metric)


def averaged(rows_by_member: dict[str, list[PredictionRow]], members: tuple[str, ...]) -> np.ndarray:
    """(D, C) mean of the members' probabilities before their own calibration, document by document (the ensemble's
    calibration is fitted over this mean: `average_calibration`)."""
    return np.mean([[r.combined_probabilities for r in rows_by_member[m]] for m in members], axis=0)


def average_calibration(validation: dict[str, list[PredictionRow]] | None, members: tuple[str, ...],
                        choice: str = "auto") -> Calibration | None:
    """The calibration of the members' mean probabilities, fitted on their validation rows (`fit_calibration`:
    temperature scaling, kept where it lowers held-out NLL); None without validation rows."""
    if validation is None or any(validation.get(m) is None for m in members):
        return None
    labels = np.array([r.label for r in validation[members[0]]])
    return fit_calibration(averaged(validation, members), labels, multi_label=False, choice=choice)


def averaged_rows(rows_by_member: dict[str, list[PredictionRow]], members: tuple[str, ...],
                  label_names: list[str] | None = None, calibration: Calibration | None = None) -> list[PredictionRow]:
    """The rows of the members' averaged probabilities, in a run's predictions-<split>.jsonl form, for the first
    member's documents (their ids and labels kept); with a `calibration`, the mean calibrated as the ensemble answers,
    the mean itself kept as `uncalibrated`."""
    mean = averaged(rows_by_member, members)  # (D, C)
    calibrated = calibration is not None and calibration.method != "none"
    answered = calibration.apply(mean) if calibrated else mean
    out = []
    for row, p, before in zip(rows_by_member[members[0]], answered, mean):
        predicted = int(np.argmax(p))
        out.append(dataclasses.replace(
            row, probabilities=[float(q) for q in p], predicted=predicted, unit_weights=None,
            predicted_label=label_names[predicted] if label_names else None,
            uncalibrated=[float(q) for q in before] if calibrated else None))
    return out


EXHAUSTIVE_UP_TO = 10  # runs: every group of two or more is scored (1,013 groups at 10); past it, forward selection


def choose_members(validation: dict[str, list[PredictionRow]], metric: str,
                   strategy_of: dict[str, str] | None = None) -> tuple[tuple[str, ...], float, int]:
    """(members, their validation score, how many groups were scored): the group of two or more runs whose averaged
    validation probabilities score best by `metric` (accuracy or macro_f1). `strategy_of` (run -> strategy, for
    compare --seeds) keeps to groups of two strategies or more: one strategy's seeds averaged are its seed row.
    Up to EXHAUSTIVE_UP_TO runs every group is scored; ties go to the smaller group, then to the group whose runs
    come first in `validation`'s order. Past it, `forward_selection`."""
    names = list(validation)
    mixed = _mixed(strategy_of)
    if len(names) > EXHAUSTIVE_UP_TO:
        return forward_selection(validation, metric, mixed)
    groups = [g for size in range(2, len(names) + 1) for g in itertools.combinations(names, size) if mixed(g)]
    return _best_group(validation, groups, metric) + (len(groups),)


def forward_selection(validation: dict[str, list[PredictionRow]], metric: str,
                      allowed=lambda group: True) -> tuple[tuple[str, ...], float, int]:
    """choose_members' answer for many runs, as Caruana et al. (2004) select an ensemble from a library of models:
    the best pair (of those `allowed`), then, one run at a time, the run whose addition raises the group's
    validation score most, until no run raises it. Each run joins at most once. Scores O(n²) groups, not 2^n."""
    names = list(validation)
    groups = [g for g in itertools.combinations(names, 2) if allowed(g)]
    members, best = _best_group(validation, groups, metric)
    while len(members) < len(names):
        grown = [members + (n,) for n in names if n not in members]
        groups += grown
        candidate, value = _best_group(validation, grown, metric)
        if value <= best:
            break
        members, best = candidate, value
    return members, best, len(groups)


def _mixed(strategy_of: dict[str, str] | None):
    """A test of a group: True when its runs come from two strategies or more (always, with no `strategy_of`)."""
    if strategy_of is None:
        return lambda group: True
    return lambda group: len({strategy_of[name] for name in group}) > 1


def _best_group(validation: dict[str, list[PredictionRow]], groups: list[tuple[str, ...]],
                metric: str) -> tuple[tuple[str, ...], float]:
    """(the group whose averaged validation probabilities score best, its score); ties go to the smaller group, then
    to the earlier one in `groups`."""
    first = next(iter(validation.values()))
    scored = [(score(first, averaged(validation, g), metric), -len(g), -i) for i, g in enumerate(groups)]
    best = max(range(len(groups)), key=lambda i: scored[i])
    return groups[best], scored[best][0]


def scored(rows: list[PredictionRow], label_names: list[str]) -> dict:
    """The test metrics (`compute_metrics`) of single-label prediction rows (with their calibration before and after,
    where the rows keep their uncalibrated probabilities)."""
    before = [r.uncalibrated for r in rows]
    return compute_metrics(np.array([r.label for r in rows]), np.array([r.probabilities for r in rows]),
                           [r.n_tokens for r in rows], label_names, False,
                           uncalibrated=None if any(b is None for b in before) else np.array(before))
