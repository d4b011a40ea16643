"""Check, on real weights and real text, that an ensemble folder written by `longbert ensemble` (or by compare, for
its model to deploy) computes what its recorded test rows say: the mean of its members' kept test probabilities.
It reads the first N test documents of the folder's recipe, runs the saved ensemble on them, and prints the largest
difference from its predictions-test.jsonl.

    longbert ensemble runs/compare/compare_imdb_learned/chunk runs/compare/compare_imdb_learned/bigbird \
        --output runs/ensembles/imdb_learned
    python benchmarks/scripts/check_ensemble_folder.py runs/ensembles/imdb_learned --documents 8
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from longbert.config import load_recipe
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.utils.hardware import autocast_for

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("folder", type=Path, help="an ensemble folder (its best/, recipe.yaml, predictions-test.jsonl)")
parser.add_argument("--documents", type=int, default=8)
args = parser.parse_args()

try:
    model = LongDocumentClassifier.from_pretrained(args.folder)
except LongbertError as error:
    raise SystemExit(f"error: {error}") from None
if model.ensemble is None:
    raise SystemExit(f"error: {args.folder} holds one model, not an ensemble")
recipe = load_recipe(args.folder / "recipe.yaml")
test = load_corpus(recipe.data, model.tokenizer, recipe.seed, False, roles=["test"]).splits["test"]
kept = {row["index"]: row for row in map(json.loads, open(args.folder / "predictions-test.jsonl"))}
indices = list(range(min(args.documents, len(test))))
documents = [torch.as_tensor(test[i]["input_ids"]) for i in indices]
with torch.no_grad(), autocast_for(model):
    computed = model.probabilities(model(documents).logits).float().numpy()
recorded = np.array([kept[i]["probabilities"] for i in indices])
print(f"{len(indices)} test documents ({min(map(len, documents))}-{max(map(len, documents))} tokens), members "
      f"{' + '.join(model.ensemble.facts.members)}: largest difference from the recorded rows "
      f"{np.abs(computed - recorded).max():.2e}; labels agree on {(computed.argmax(1) == recorded.argmax(1)).sum()} "
      f"of {len(indices)}")
