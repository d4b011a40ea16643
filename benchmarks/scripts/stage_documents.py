"""Check, on a finished run folder, which documents each of its stages read: for the head stage and the self-training
teacher, how many of the stage's validation documents (its predictions-validation.jsonl) are the run's validation
and test documents, and how many of its training documents (its data-split.json, for a run of one data file) are
the run's validation or test documents. Documents are matched by id (data.id_column). Exits 1 when a test document
reached a stage's training or validation.

    longbert train --set data.path=reviews.jsonl --set output_dir=runs/reviews
    python benchmarks/scripts/stage_documents.py runs/reviews --json benchmarks/results/stage-documents.json
"""

import argparse
import json
import sys
from pathlib import Path

STAGES = ("head_stage", "self_training")

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("run", type=Path, help="a run folder written by `longbert train`")
parser.add_argument("--json", type=Path, help="also write the counts here")
args = parser.parse_args()


def prediction_ids(path: Path) -> set:
    if not path.is_file():
        sys.exit(f"error: {path} is missing: the run folder holds no such predictions")
    return {json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()}


def training_ids(folder: Path) -> set | None:
    split = folder / "data-split.json"
    if not split.is_file():
        return None
    ids = json.loads(split.read_text()).get("ids")
    return None if ids is None else set(ids["train"])


validation = prediction_ids(args.run / "predictions-validation.jsonl")
test = prediction_ids(args.run / "predictions-test.jsonl")
counts = {"run": str(args.run), "validation": len(validation), "test": len(test), "stages": {}}
leaked = False
for name in STAGES:
    folder = args.run / name
    if not folder.is_dir():
        continue
    seen = prediction_ids(folder / "predictions-validation.jsonl")
    trained = training_ids(folder)
    stage = {"validation": len(seen), "validation_is_the_runs": seen == validation,
             "validation_in_run_test": len(seen & test),
             "train_in_run_validation": None if trained is None else len(trained & validation),
             "train_in_run_test": None if trained is None else len(trained & test)}
    counts["stages"][name] = stage
    leaked |= bool(stage["validation_in_run_test"] or stage["train_in_run_test"])
    print(f"{name}: validates on {len(seen)} documents ({'the run' if seen == validation else 'not the run'}'s "
          f"validation), {stage['validation_in_run_test']} of them in the run's test of {len(test)}; trains on "
          f"{stage['train_in_run_validation']} of the run's {len(validation)} validation documents and "
          f"{stage['train_in_run_test']} of its test documents")
if not counts["stages"]:
    print(f"{args.run} has no stage folders ({', '.join(STAGES)})")
if args.json:
    args.json.write_text(json.dumps(counts, indent=2) + "\n")
sys.exit(1 if leaked else 0)
