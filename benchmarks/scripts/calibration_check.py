"""Calibration of trained runs, measured: temperature scaling fitted on each run's validation predictions (kept only
when it lowers held-out NLL, longbert.modeling.calibration), then ECE, NLL and Brier score on its test predictions
before and after, and the share of test documents answered at a target accuracy.

    python benchmarks/scripts/calibration_check.py runs/compare/compare_imdb/chunk runs/compare/compare_imdb/truncate
    python benchmarks/scripts/calibration_check.py \
        benchmarks/results/predictions/hp_defaults_20261128-truncate-{validation,test}.jsonl.gz --pairs

A run is a run folder (its predictions-validation.jsonl and predictions-test.jsonl) or, with --pairs, a validation
file followed by its test file (.jsonl or .jsonl.gz, as committed under benchmarks/results/predictions/). Nothing is
fitted on test. Prints one line per run; `--json FILE` also writes them.
"""
import argparse
import json
from pathlib import Path

import numpy as np

from longbert.evaluation.predictions import read_prediction_rows
from longbert.evaluation.reliability import calibration_metrics, coverage_curve, threshold_for_accuracy
from longbert.modeling.calibration import fit_calibration

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("runs", nargs="+", type=Path, help="run folders, or validation and test files with --pairs")
parser.add_argument("--pairs", action="store_true", help="the arguments are validation file, test file, ...")
parser.add_argument("--target", type=float, default=0.95, help="accuracy the coverage line is read at")
parser.add_argument("--json", type=Path, default=None)
args = parser.parse_args()
if args.pairs and len(args.runs) % 2:
    raise SystemExit("error: --pairs takes a validation file and a test file for each run")
pairs = (list(zip(args.runs[::2], args.runs[1::2])) if args.pairs
         else [(run / "predictions-validation.jsonl", run / "predictions-test.jsonl") for run in args.runs])


def arrays(path: Path) -> tuple[np.ndarray, np.ndarray, bool]:
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist")
    rows = read_prediction_rows(path)
    multi_label = isinstance(rows[0].label, list)
    return np.array([r.probabilities for r in rows]), np.array([r.label for r in rows]), multi_label


def summary(metrics: dict) -> dict:
    return {k: round(metrics[k], 4) for k in ("ece", "nll", "brier", "mean_confidence")}


out = []
for validation, test in pairs:
    v_probabilities, v_labels, multi_label = arrays(validation)
    t_probabilities, t_labels, _ = arrays(test)
    calibration = fit_calibration(v_probabilities, v_labels, multi_label)
    calibrated = calibration.apply(t_probabilities)
    same = bool(np.array_equal(calibrated >= 0.5, t_probabilities >= 0.5) if multi_label
                else np.array_equal(calibrated.argmax(1), t_probabilities.argmax(1)))
    point = threshold_for_accuracy(coverage_curve(calibrated, t_labels, multi_label), args.target)
    row = {"validation": str(validation), "test": str(test), "method": calibration.method,
           "temperatures": [round(t, 4) for t in calibration.temperatures], "validation_documents": len(v_labels),
           "test_documents": len(t_labels), "predictions_unchanged": same,
           "before": summary(calibration_metrics(t_probabilities, t_labels, multi_label)),
           "after": summary(calibration_metrics(calibrated, t_labels, multi_label)),
           f"coverage_at_{args.target}": point and round(point["coverage"], 4)}
    out.append(row)
    print(f"{test}: {calibration.method} T={row['temperatures']}; ECE {row['before']['ece']:.3f} -> "
          f"{row['after']['ece']:.3f}, NLL {row['before']['nll']:.3f} -> {row['after']['nll']:.3f}, Brier "
          f"{row['before']['brier']:.3f} -> {row['after']['brier']:.3f}; predictions unchanged: {same}; answers "
          f"{row[f'coverage_at_{args.target}']} of test at >= {args.target:.0%} accuracy")
if args.json:
    args.json.write_text(json.dumps(out, indent=2) + "\n")
