"""Classify long documents with a saved longbert model through transformers' `pipeline`.

    python examples/train_and_predict.py          # first: trains a model into runs/examples/train_and_predict
    python examples/pipeline.py                   # reads its kept model (best/)
    python examples/pipeline.py MODEL             # or any saved model: a folder, a hub id

A saved model is a transformers model: the pipeline reads each document whole (no truncation at 512 tokens), as
`model.predict` does, so code written for transformers' classifiers works with it unchanged.
"""
import argparse
from pathlib import Path

from transformers import pipeline

import longbert  # noqa: F401  (importing longbert registers its model type with transformers' Auto classes)

TRAINED = "runs/examples/train_and_predict/best"

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("model", nargs="?", default=TRAINED,
                    help="a saved model folder or hub id (default: what examples/train_and_predict.py kept)")
args = parser.parse_args()
if args.model == TRAINED and not Path(TRAINED).is_dir():
    raise SystemExit(f"error: {TRAINED} does not exist; run examples/train_and_predict.py first, or name a model")

# top_k=None: every label's score, not only the best one's.
classify = pipeline("text-classification", model=args.model, top_k=None)
texts = ["A wonderful film. " + "The story opens in a small harbour town. " * 60 + "I would gladly see it again.",
         "A dull, tiresome film. " + "The brothers argue about the family boat. " * 60]
for text, scores in zip(texts, classify(texts)):
    best = max(scores, key=lambda score: score["score"])
    every = ", ".join(f"{score['label']} {score['score']:.3f}" for score in scores)
    print(f"{best['label']}  ({every})  {len(classify.tokenizer(text)['input_ids'])} tokens: {text[:50]}...")
