"""The classical baseline for a recipe, on its own: TF-IDF (words and bigrams) + logistic regression
(longbert.baseline, the row every `longbert compare` report shows), trained on the recipe's own training documents
(same data settings, seed and subsample), C chosen on its validation split, scored once on its test split.

    python examples/tfidf_baseline.py recipes/imdb_rating.yaml
"""
import sys

import longbert
from longbert.backbone import load_tokenizer
from longbert.baseline import tfidf_baseline
from longbert.data import load_corpus

recipe = longbert.load_recipe(sys.argv[1], sys.argv[2:])
corpus = load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed,
                     recipe.model.problem_type == "multi_label")
result = tfidf_baseline(corpus)
test = result["metrics"]
headline = "exact_match" if corpus.multi_label else "accuracy"
print(f"{len(corpus.splits['train'])} train / {len(corpus.splits['test'])} test, C={result['settings']['C']} "
      f"(validation {headline}: {result['validation']}): test {headline} {test[headline]:.4f}, "
      f"macro-F1 {test['macro_f1']:.4f}, {result['train_seconds']:.1f}s; by length: "
      + ", ".join(f"{b} {r[headline]:.4f} (n={r['documents']})" for b, r in test["by_length"].items() if r["documents"]))
