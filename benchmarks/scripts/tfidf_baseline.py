"""The classical baseline for a recipe, on its own: TF-IDF (words and bigrams) + logistic regression
(longbert.comparison.baseline, the row every `longbert compare` report shows), trained on the recipe's own training
documents (same data settings, seed and subsample), C chosen on its validation split, scored once on its test split.

    python benchmarks/scripts/tfidf_baseline.py recipes/imdb_rating.yaml
    python benchmarks/scripts/tfidf_baseline.py recipes/imdb_full_cpu.yaml --predictions runs/imdb_full_cpu_tfidf
        # also writes predictions-test.jsonl there, for benchmarks/scripts/paired_runs.py against the trained run

Arguments after the recipe are overrides, as `longbert train --set` takes them (train.epochs=3).
"""
import argparse
from pathlib import Path

import longbert
from longbert.comparison.baseline import prediction_rows, tfidf_baseline
from longbert.config.recipe import is_multi_label
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.evaluation.predictions import write_prediction_rows
from longbert.modeling.backbone import load_tokenizer
from longbert.utils.atomic import write_json

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("recipe")
parser.add_argument("overrides", nargs="*", help="recipe overrides, key=value")
parser.add_argument("--predictions", type=Path, default=None,
                    help="a folder to write the test predictions to (predictions-test.jsonl, metrics.json)")
args = parser.parse_args()

try:
    recipe = longbert.load_recipe(args.recipe, args.overrides)
    corpus = load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed,
                         is_multi_label(recipe.model.problem_type))
except LongbertError as error:
    raise SystemExit(f"error: {error}") from None
result = tfidf_baseline(corpus)
test = result["metrics"]
headline = "exact_match" if corpus.multi_label else "accuracy"
print(f"{len(corpus.splits['train'])} train / {len(corpus.splits['test'])} test, C={result['settings']['C']} "
      f"(validation {headline}: {result['validation']}): test {headline} {test[headline]:.4f}, "
      f"macro-F1 {test['macro_f1']:.4f}, {result['train_seconds']:.1f}s; by length: "
      + ", ".join(f"{b} {r[headline]:.4f} (n={r['documents']})" for b, r in test["by_length"].items()
                  if r["documents"]))
if args.predictions is not None:
    args.predictions.mkdir(parents=True, exist_ok=True)
    rows = prediction_rows(result, list(corpus.splits["test"]["n_tokens"]))
    write_prediction_rows(args.predictions / "predictions-test.jsonl", rows)
    write_json(args.predictions / "metrics.json", {"recipe": recipe.name, "baseline": result["settings"],
                                                   "validation": result["validation"], "test": test,
                                                   "train_seconds": result["train_seconds"]})
    print(f"wrote {args.predictions / 'predictions-test.jsonl'}")
