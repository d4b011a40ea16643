"""A trained run's kept model calibrated after the fact and evaluated through the product's own path: the run folder
is copied (its recipe, its validation predictions, its best/ model), a temperature is fitted on the validation
predictions as training now fits it at its end (`longbert.modeling.calibration.fit_calibration`, the recipe's
model.calibration, auto by default), written into the copy's longbert_config.json, and `longbert.evaluate(copy,
"test")` measures the test split with the calibrated model: metrics-test.json's calibration section holds ECE, NLL
and Brier score after and before. The original run is only read.

    python benchmarks/scripts/calibrated_evaluation.py runs/compare/compare_imdb/chunk /tmp/ev/imdb-chunk \
        --json benchmarks/results/calibrated-evaluation-imdb-chunk.json

For runs trained before calibration existed; a run trained now is calibrated already.
"""
import argparse
import json
import shutil
from pathlib import Path

import numpy as np

import longbert
from longbert.evaluation.predictions import read_prediction_rows
from longbert.modeling.calibration import fit_calibration
from longbert.modeling.settings import ModelSettings
from longbert.utils.folders import BEST, CONFIG_FILE, RunFolder
from longbert.utils.hardware import describe_machine

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("run", type=Path, help="a finished run folder (read only)")
parser.add_argument("copy", type=Path, help="where its copy is made (must not exist)")
parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
parser.add_argument("--precision", default="auto", help="as predict and evaluate take it (auto: what predict uses)")
args = parser.parse_args()
if args.copy.exists():
    raise SystemExit(f"error: {args.copy} exists; name a new folder")
source = RunFolder(args.run)
if not source.is_run() or not source.predictions("validation").is_file():
    raise SystemExit(f"error: {args.run} is not a finished run with validation predictions")

args.copy.mkdir(parents=True)
shutil.copy2(source.recipe, args.copy / source.recipe.name)
shutil.copy2(source.predictions("validation"), args.copy / source.predictions("validation").name)
shutil.copytree(source.best, args.copy / BEST)
recipe = longbert.load_recipe(source.recipe)
rows = read_prediction_rows(source.predictions("validation"))
multi_label = isinstance(rows[0].label, list)
calibration = fit_calibration(np.array([r.combined_probabilities for r in rows]), np.array([r.label for r in rows]),
                              multi_label, choice=recipe.model.calibration)
settings_file = args.copy / BEST / CONFIG_FILE
settings = ModelSettings.from_file(settings_file)
settings.temperatures = calibration.model_temperatures
settings_file.write_text(json.dumps(settings.to_dict(), indent=2))

metrics = longbert.evaluate(args.copy, "test", precision=args.precision)
section = metrics["calibration"]
before = section.get("uncalibrated", section)
headline = lambda m: {k: round(m[k], 4) for k in ("ece", "nll", "brier", "mean_confidence")}
summary = {"run": str(args.run), "precision": args.precision, "machine": describe_machine(),
           "calibration": calibration.to_dict(), "test_documents": metrics["documents"],
           "accuracy": round(metrics.get("accuracy", metrics.get("exact_match")), 4),
           "before": headline(before), "after": headline(section),
           "by_length_ece": {name: {"documents": b["documents"], "before": round(before["by_length"][name]["ece"], 4),
                                    "after": round(b["ece"], 4)}
                             for name, b in section["by_length"].items() if b["documents"]}}
print(json.dumps(summary, indent=2))
if args.json:
    args.json.write_text(json.dumps(summary, indent=2) + "\n")
