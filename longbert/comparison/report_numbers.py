"""The numbers of a comparison report: the test-prediction rows each run wrote, and `assemble_results`, which turns
the runs, their predictions, speed measurements and error-analysis examples into the results dict that
results.json holds and `longbert.comparison.render` renders (every number the report shows comes from it)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from pathlib import Path

import numpy as np

from longbert import __version__
from longbert.comparison.baseline import BASELINE
from longbert.comparison.formatting import COMBINED, report_rows
from longbert.comparison.statistics import detectable_difference, mcnemar_p, wilson_interval
from longbert.config import head_epochs, is_multi_label
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows
from longbert.evaluation.reliability import (
    calibration_section,
    coverage_curve,
    document_confidence,
    threshold_for_accuracy,
)
from longbert.utils.folders import RunFolder, predictions_file

PREDICTIONS_FILE = predictions_file("test")
# Abstention: the accuracy a row must reach on the documents it answers; the confidence threshold that reaches it is
# chosen on validation, and what it does is reported on test.
TARGET_ACCURACY = 0.95
THRESHOLD_STEPS = 100  # the validation coverage curve the threshold is chosen on: a point per 1% of documents


def read_predictions(run_dir: Path) -> list[PredictionRow]:
    """The rows of a run folder's predictions-test.jsonl, one per test document in order."""
    path = RunFolder(run_dir).predictions("test")
    if not path.is_file():
        raise LongbertError(f"{run_dir} has no {PREDICTIONS_FILE}; compare needs a test split (data.test_split)")
    return read_prediction_rows(path)


def paired_comparisons(predictions: dict[str, list[PredictionRow]], long_tokens: int) -> list[dict]:
    """Every pair of strategies (and the baseline, when `predictions` holds it), on all test documents and on the
    long ones: how many documents, who alone was right how often, the exact McNemar p-value of that split, and the
    smallest accuracy difference the test could detect at this size and disagreement (80% power, alpha 0.05)."""
    names = list(predictions)
    out = []
    for x, a in enumerate(names):
        for b in names[x + 1 :]:
            for subset in ("all", "long"):
                only_a = only_b = documents = 0
                for ra, rb in zip(predictions[a], predictions[b]):
                    if subset == "long" and ra.n_tokens <= long_tokens:
                        continue
                    documents += 1
                    only_a += ra.right and not rb.right
                    only_b += rb.right and not ra.right
                out.append({"a": a, "b": b, "documents": subset, "n": documents, "only_a_right": only_a,
                            "only_b_right": only_b, "p_value": mcnemar_p(only_a, only_b),
                            "detectable_difference": detectable_difference(documents, only_a + only_b)})
    return out


MAX_GROUPS = 20  # more id groups than this are not a design of the test set: no table


def id_group(row: PredictionRow) -> str | None:
    """A test document's group, from its id: the part before the last '-' ('depth-0600-000123' -> 'depth-0600'), or
    None for an id without one (a row number, a plain name)."""
    value = row.id
    return value.rsplit("-", 1)[0] if isinstance(value, str) and "-" in value.strip("-") else None


def accuracy_by_group(predictions: dict[str, list[PredictionRow]]) -> dict | None:
    """Accuracy per group of test documents, for every row of `predictions` (keyed by name, rows in the same document
    order), when the test documents' ids name groups (`id_group`: every id has one, 2 to MAX_GROUPS groups), as a
    probe's ids do (depth-0600-000123: the evidence at word 600); else None. The ids are read from the first rows
    that carry them (the baseline's rows have none and are aligned by position)."""
    with_ids = next((rows for rows in predictions.values() if rows and rows[0].id is not None), None)
    if with_ids is None:
        return None
    groups = [id_group(r) for r in with_ids]
    names = sorted(set(groups), key=lambda g: (g is None, g))
    if None in names or not 2 <= len(names) <= MAX_GROUPS:
        return None
    counts = {g: groups.count(g) for g in names}
    accuracy = {}
    for name, rows in predictions.items():
        right = dict.fromkeys(names, 0)
        for group, row in zip(groups, rows):
            right[group] += row.right
        accuracy[name] = {g: right[g] / counts[g] for g in names}
    return {"groups": names, "documents": counts, "accuracy": accuracy}


def baseline_fields(result: dict) -> dict:
    """What the results dict keeps of `baseline.tfidf_baseline`'s result besides the test summary."""
    return {"settings": result["settings"], "validation": result["validation"],
            "train_seconds": result["train_seconds"]}


def test_summary(rows: list[PredictionRow], test: dict, long_tokens: int, label_names: list[str] | None = None) -> dict:
    """Accuracy with its interval, macro-F1, accuracy by length bucket and on the long documents, from a classifier's
    prediction rows and its test metrics. For multi-label rows a row is right when every label is (exact match): the
    same number as the test metrics' accuracy or exact_match, recomputed from the rows the paired tests use."""
    right = sum(r.right for r in rows)
    long_rows = [r for r in rows if r.n_tokens > long_tokens]
    long_right = sum(r.right for r in long_rows)
    return {
        "accuracy": right / len(rows) if rows else None,
        "accuracy_ci95": wilson_interval(right, len(rows)),
        "macro_f1": test["macro_f1"],
        "documents": test["documents"],
        "by_length": {bucket: {"documents": row["documents"], "accuracy": row.get("accuracy", row.get("exact_match"))}
                      for bucket, row in test["by_length"].items()},
        "long": {"documents": len(long_rows), "accuracy": long_right / len(long_rows) if long_rows else None,
                 "ci95": wilson_interval(long_right, len(long_rows))},
        "calibration": test.get("calibration") or measured_calibration(rows, label_names),
    }


def arrays(rows: list[PredictionRow]) -> tuple[np.ndarray, np.ndarray, bool]:
    """(D, C) probabilities, the labels ((D,) or (D, C) multi-hot) and whether they are multi-label, of `rows`."""
    return (np.array([r.probabilities for r in rows], dtype=np.float64), np.array([r.label for r in rows]),
            isinstance(rows[0].label, list))


def measured_calibration(rows: list[PredictionRow], label_names: list[str] | None = None) -> dict | None:
    """A row's calibration section (`calibration_section`; a multi-label one's labels named by `label_names`)
    measured from its prediction rows: for a run whose metrics come from before they held one. None without rows."""
    if not rows:
        return None
    probabilities, labels, multi_label = arrays(rows)
    before = [r.uncalibrated for r in rows]
    return calibration_section(probabilities, labels, [r.n_tokens for r in rows], multi_label,
                               None if any(b is None for b in before) else np.array(before), label_names)


def abstention(validation: list[PredictionRow] | None, test: list[PredictionRow], target: float) -> dict | None:
    """A row's abstention: the confidence threshold chosen on `validation` (the one that answers the most validation
    documents at `target` accuracy or better, `threshold_for_accuracy`), then applied to `test`: the share of test
    documents answered (confidence at or above it) and their accuracy. None without validation or test rows;
    threshold None where no share of validation documents reaches the target."""
    if not validation or not test:
        return None
    curve = coverage_curve(*arrays(validation), steps=min(THRESHOLD_STEPS, len(validation)))
    chosen = threshold_for_accuracy(curve, target)
    if chosen is None:
        return {"target": target, "threshold": None, "validation": {"documents": len(validation)}, "test": None}
    confidence, correct = document_confidence(*arrays(test))
    answered = confidence >= chosen["threshold"]
    return {"target": target, "threshold": chosen["threshold"],
            "validation": {"documents": len(validation), "answered": chosen["answered"],
                           "coverage": chosen["coverage"], "accuracy": chosen["accuracy"]},
            "test": {"documents": len(test), "answered": int(answered.sum()), "coverage": float(answered.mean()),
                     "accuracy": float(correct[answered].mean()) if answered.any() else None}}


def assemble_results(*, name, names, recipes, runs, predictions, speed, examples, command, base_source, overrides,
                     machine, long_tokens, label_names, baseline=None, combined=(), combined_notes=(),
                     seeds=None, validation=None, target_accuracy=TARGET_ACCURACY) -> dict:
    """The results dict: per strategy its settings, test metrics with intervals, cost and speed by length; the
    shared budget and data; paired comparisons; the error-analysis examples; notes on anything not comparable.

    names: strategies in report order; recipes, runs ({status, metrics}), predictions (rows) and speed (by length
    bucket) are keyed by strategy; examples: what `analysis.build_examples` returned. baseline: what
    `baseline.tfidf_baseline` returned, or None; with it, predictions also hold its rows under `baseline.BASELINE`
    and the paired comparisons include it. combined: the rows made from trained strategies without training
    (`combined.build_ensemble`'s, `combined.build_hybrid`'s and `combined.build_seed_ensembles`'s summaries, each
    with 'name' and 'metrics'), whose test rows predictions hold under their names; the seed rows go to the list
    'seed_ensembles'; combined_notes: why one is missing, when it is. seeds: every seed each strategy was trained at
    (None: the recipe's seed alone). validation: each row's validation prediction rows by name (None or missing:
    it kept none), on which its abstention threshold for `target_accuracy` is chosen (`abstention`)."""
    strategies = {s: _strategy_result(s, recipes, runs, predictions, speed, long_tokens) for s in names}
    _add_relative_costs(strategies, names)
    first = recipes[names[0]]
    steps = {s: strategies[s]["steps"] for s in names}
    notes = _notes(first, strategies, steps, combined_notes)
    test_rows = predictions[names[0]]
    classes, long_classes = _class_counts(test_rows, label_names, long_tokens)
    results = {
        "name": name,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "longbert_version": __version__,
        "command": command,
        "base_recipe": base_source,
        "overrides": overrides,
        "machine": machine,
        "strategy_order": names,
        "label_names": label_names,
        "problem_type": first.model.problem_type,
        "budget": _budget(first, steps, seeds),
        "data": {
            "path": first.data.path,
            "splits": runs[names[0]]["metrics"].data,
            "test_documents": len(test_rows),
            "long_tokens": long_tokens,
            "long_documents": sum(r.n_tokens > long_tokens for r in test_rows),
            "class_counts": classes,
            "long_class_counts": long_classes,
        },
        "strategies": strategies,
        "baseline": None if baseline is None else {
            "name": BASELINE, **baseline_fields(baseline), **test_summary(predictions[BASELINE], baseline["metrics"],
                                                                         long_tokens, label_names)},
        **_combined_results(combined, predictions, long_tokens),
        "comparisons": paired_comparisons(predictions, long_tokens),
        "by_group": accuracy_by_group(predictions),
        "error_analysis": {"long_tokens": long_tokens, "examples": examples,
                           "spans": "[start, end) indices of content tokens (0-based, [CLS]/[SEP] not counted)"},
        "notes": notes,
        "target_accuracy": target_accuracy,
    }
    for row_name, entry in report_rows(results).items():
        entry["abstention"] = abstention((validation or {}).get(row_name), predictions[row_name], target_accuracy)
    return results


def _strategy_result(s: str, recipes, runs, predictions, speed, long_tokens: int) -> dict:
    """Strategy `s`'s entry in results["strategies"] (its relative cost is added once every entry is made)."""
    metrics = runs[s]["metrics"]
    test = metrics.test
    return {
        "status": runs[s]["status"],
        "run_dir": recipes[s].output_dir,
        # As the model was built (token_pooling's auto resolved); runs from before that was recorded: the recipe's.
        "settings": metrics.strategy_settings or dataclasses.asdict(recipes[s].strategy),
        **test_summary(predictions[s], test, long_tokens, metrics.label_names),
        "confusion_matrix": test["confusion_matrix"],
        "per_class": test.get("per_class"),
        "train_seconds": metrics.train_seconds,
        "head_stage": metrics.head_stage,
        "reading": metrics.reading,  # how the end-to-end stage read (train.reading), its time and tokens
        "steps": metrics.steps,
        "trainable_parameters": metrics.trainable_parameters,
        "speed": test["speed"],
        "speed_by_length": speed[s],
        "eval_batch_size": recipes[s].eval.batch_size,
        "mixed_precision": metrics.mixed_precision,
        "machine": metrics.machine,
    }


def _add_relative_costs(strategies: dict[str, dict], names) -> None:
    """Each strategy's inference and training cost relative to the cheapest strategy's (None where unmeasured)."""
    fastest = max((strategies[s]["speed"]["documents_per_second"] or 0) for s in names) or None
    quickest_train = min(strategies[s]["train_seconds"] or math.inf for s in names)
    for s in names:
        dps = strategies[s]["speed"]["documents_per_second"]
        strategies[s]["relative_cost"] = {
            "inference": fastest / dps if fastest and dps else None,
            "training": (strategies[s]["train_seconds"] / quickest_train
                         if quickest_train not in (0, math.inf) else None),
        }


def _notes(first, strategies: dict[str, dict], steps: dict[str, int], combined_notes) -> list[str]:
    """What the report says is not comparable, or reads differently, among the runs."""
    notes = []
    if is_multi_label(first.model.problem_type):
        notes.append("multi-label runs: 'accuracy' here is exact match (a document counts as right only when every "
                     "label is); micro-F1, Hamming loss and the thresholds are in each run's metrics.json")
    if len(set(steps.values())) > 1:
        notes.append(f"the strategies took different numbers of optimisation steps: {steps}")
    machines = {json.dumps(entry["machine"], sort_keys=True) for entry in strategies.values()}
    if len(machines) > 1:
        notes.append("the runs were trained on different machines: training times are not comparable")
    return notes + [note for note in combined_notes if note]


def _class_counts(test_rows: list[PredictionRow], label_names: list[str], long_tokens: int) -> tuple[dict, dict]:
    """Test documents per class (per label, for multi-label), all and long: the class balance the tables state."""
    classes, long_classes = dict.fromkeys(label_names, 0), dict.fromkeys(label_names, 0)
    for r in test_rows:
        hot = r.label if isinstance(r.label, list) else [int(i == r.label) for i in range(len(label_names))]
        for n, h in zip(label_names, hot):
            classes[n] += h
            long_classes[n] += h if r.n_tokens > long_tokens else 0
    return classes, long_classes


def _budget(first, steps: dict[str, int], seeds) -> dict:
    """The training budget every strategy shared (from the first strategy's recipe), and the steps each took. A frozen
    run's epochs are those of its head over the cached units (train.frozen_head_epochs)."""
    return {
        "seed": first.seed,
        "seeds": list(seeds) if seeds else [first.seed],
        "backbone": first.backbone.name,
        "finetune": first.model.finetune,
        "epochs": head_epochs(first.train, head_stage=False) if first.model.backbone_frozen else first.train.epochs,
        "max_steps": first.train.max_steps,
        "batch_size": first.train.batch_size,
        "gradient_accumulation": first.train.gradient_accumulation,
        "learning_rate": first.train.learning_rate,
        "steps": steps,
    }


def _combined_results(combined, predictions: dict[str, list[dict]], long_tokens: int) -> dict:
    """The combined rows' entries: one key per kind (None when that row is missing), and 'seed_ensembles'."""
    def summarised(row: dict) -> dict:
        return {**{k: v for k, v in row.items() if k != "metrics"},
                **test_summary(predictions[row["name"]], row["metrics"], long_tokens)}

    return {
        **{key: None for key in COMBINED},
        **{c["name"]: summarised(c) for c in combined if "seeds" not in c},
        "seed_ensembles": [summarised(c) for c in combined if "seeds" in c],
    }
