"""Paired test between trained runs that are not in one `longbert compare` report (for example the same strategy
on two backbones): the exact McNemar test and the detectable difference that reports use, on all test documents
and on those longer than 512 tokens. The runs must have predicted the same test documents in the same order.

    python benchmarks/scripts/paired_runs.py runs/compare/hyperpartisan_defaults/truncate \
        runs/compare/hyperpartisan_pretrained/chunk
    python benchmarks/scripts/paired_runs.py benchmarks/results/predictions/reach_depth_learned-chunk-test.jsonl.gz \
        runs/compare/reach_depth_sliding/sliding

A run is a run folder (its predictions-test.jsonl) or a predictions file itself, gzipped as committed under
benchmarks/results/predictions/ or not, so that a run of one session pairs with the committed rows of another.

Prints one line per pair and subset; `--json FILE` also writes them.
"""
import argparse
import json
from pathlib import Path

from longbert.comparison.report_numbers import paired_comparisons, read_predictions
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PredictionRow, read_prediction_rows

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("runs", nargs="+", type=Path, help="run folders holding predictions-test.jsonl, or such files "
                                                         "(.jsonl or .jsonl.gz)")
parser.add_argument("--long-tokens", type=int, default=512)
parser.add_argument("--json", type=Path, default=None)
args = parser.parse_args()
if len(args.runs) < 2:
    raise SystemExit("error: give at least two run folders")


def rows_of(run: Path) -> list[PredictionRow]:
    return read_predictions(run) if run.is_dir() else read_prediction_rows(run)


try:
    rows = {str(run): rows_of(run) for run in args.runs}
except (LongbertError, OSError, ValueError) as error:
    raise SystemExit(f"error: {error}") from None
expected = [(r.index, r.label) for r in next(iter(rows.values()))]
for run, predictions in rows.items():
    if [(r.index, r.label) for r in predictions] != expected:
        raise SystemExit(f"error: {run} predicted other test documents than {args.runs[0]}")
summary = {}
for run, predictions in rows.items():
    long_rows = [r for r in predictions if r.n_tokens > args.long_tokens]
    summary[run] = {"accuracy": sum(r.right for r in predictions) / len(predictions), "documents": len(predictions),
                    "long_accuracy": sum(r.right for r in long_rows) / len(long_rows) if long_rows else None,
                    "long_documents": len(long_rows)}
    long_accuracy = f"{summary[run]['long_accuracy']:.4f}" if long_rows else "n/a"
    print(f"{run}: accuracy {summary[run]['accuracy']:.4f} (n={len(predictions)}), over {args.long_tokens} tokens "
          f"{long_accuracy} (n={len(long_rows)})")
pairs = paired_comparisons(rows, args.long_tokens)
for pair in pairs:
    detectable = pair["detectable_difference"]
    print(f"{pair['a']} vs {pair['b']} ({pair['documents']}, n={pair['n']}): only A right {pair['only_a_right']}, "
          f"only B right {pair['only_b_right']}, McNemar p = {pair['p_value']:.3g}, detectable difference "
          + (f"{100 * detectable:.1f} points" if detectable is not None else "none"))
if args.json:
    args.json.write_text(json.dumps({"runs": summary, "pairs": pairs}, indent=1) + "\n")
