"""Accuracy of runs by document group: reads each run folder's predictions-test.jsonl (written by `longbert train`,
`longbert evaluate --split test`, `longbert compare`, or benchmarks/scripts/tfidf_baseline.py --predictions) and prints
a Markdown table, runs as rows, groups as columns, each cell the accuracy and its count. A document's group is its id up
to the last '-' (depth-0600-000123 -> depth-0600: the ids benchmarks/scripts/make_reach_probe.py writes); `all` is every
document. Documents whose id has no '-' (a run on data without ids numbers its rows) count in `all` only.

    python benchmarks/scripts/accuracy_by_group.py runs/compare/compare_reach/* [--json by_group.json]

--json also writes the numbers: {"groups": [...], "runs": [{"run", "all": {"accuracy", "documents"}, "groups": {...},
"ungrouped"}]}. A run folder that is missing, or has no readable predictions-test.jsonl, is one error line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from longbert.comparison.report_numbers import id_group
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows

PREDICTIONS = "predictions-test.jsonl"


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_predictions(run: Path) -> list[PredictionRow]:
    """The rows of `run`/predictions-test.jsonl, each with a label and a prediction; any problem is fail()."""
    if not run.is_dir():
        fail(f"{run} is not a folder")
    file = run / PREDICTIONS
    if not file.is_file():
        fail(f"{run} holds no {PREDICTIONS} (longbert train/evaluate and tfidf_baseline.py --predictions write it)")
    try:
        rows = read_prediction_rows(file)
    except LongbertError as error:
        fail(str(error))
    except (OSError, UnicodeDecodeError) as error:
        fail(f"{file} cannot be read: {error}")
    if not rows:
        fail(f"{file} holds no predictions")
    return rows


def score(rows: list[PredictionRow]) -> dict:
    """{"all": {accuracy, documents}, "groups": {group: {accuracy, documents}}, "ungrouped": documents}."""
    tallies: dict[str, list[int]] = {}  # group -> [right, documents]
    right = ungrouped = 0
    for row in rows:
        correct = int(row.right)
        right += correct
        group = id_group(row)  # depth-0600-000123 -> depth-0600, as compare's report groups them
        if group is None:
            ungrouped += 1
            continue
        tally = tallies.setdefault(group, [0, 0])
        tally[0] += correct
        tally[1] += 1
    cell = lambda r, n: {"accuracy": r / n, "documents": n}
    return {"all": cell(right, len(rows)), "groups": {g: cell(*t) for g, t in sorted(tallies.items())},
            "ungrouped": ungrouped}


def markdown(results: list[dict], groups: list[str]) -> str:
    shown = lambda c: f"{c['accuracy']:.4f} (n={c['documents']})" if c else "-"
    row = lambda cells: "| " + " | ".join(cells) + " |"
    lines = [row(["run", "all", *groups]), "|---" * (2 + len(groups)) + "|"]
    for result in results:
        name = result["run"].replace("|", "\\|")
        lines.append(row([name, shown(result["all"]), *(shown(result["groups"].get(g)) for g in groups)]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run folders holding predictions-test.jsonl")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args()
    results = []
    for run in args.runs:
        result = {"run": str(run), **score(read_predictions(run))}
        if not result["groups"]:
            print(f"note: {run}: no prediction has an id with a group (tfidf_baseline.py writes no ids); "
                  "only `all` is shown", file=sys.stderr)
        results.append(result)
    groups = sorted({g for result in results for g in result["groups"]})
    print(markdown(results, groups))
    if args.json is not None:
        try:
            args.json.write_text(json.dumps({"groups": groups, "runs": results}, indent=1) + "\n", encoding="utf-8")
        except OSError as error:
            fail(f"cannot write {args.json}: {error.strerror or error}")


if __name__ == "__main__":
    main()
