"""Document embeddings in use: embed labelled documents with any longbert model folder (`model.embed`, what
`longbert embed` writes), fit a logistic regression of one's own on the training vectors (C chosen on a held-out part
of them), and report its test accuracy beside the model's own head; with no model folder given, a frozen MiniLM
reads each document in 510-token chunks and mean-pools them (no training at all).

    python benchmarks/scripts/embed_and_classify.py [--model RUN_OR_FOLDER] [--train 500] [--test 500]
        [--longer-than 512] [--data-dir ../shared/data] [--json FILE]

Reads IMDb's train and test splits (`<data-dir>/imdb/{train,test}.jsonl.gz`), keeps reviews longer than
--longer-than tokens, and takes seeded samples of each.
"""
import argparse
import gzip
import json
import random
import time
from pathlib import Path

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--model", default=None, help="a run folder or saved model folder (default: frozen MiniLM, chunk)")
parser.add_argument("--train", type=int, default=500)
parser.add_argument("--test", type=int, default=500)
parser.add_argument("--longer-than", type=int, default=512)
parser.add_argument("--data-dir", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared" / "data")
parser.add_argument("--json", type=Path, default=None)
args = parser.parse_args()

import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

import longbert  # noqa: E402

if args.model:
    model = longbert.LongDocumentClassifier.from_pretrained(args.model)
else:
    recipe = longbert.load_recipe(None, ["strategy.name=chunk", "strategy.pooling=mean", "model.finetune=frozen"])
    model = longbert.LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])


def sample(split: str, count: int) -> tuple[list[str], np.ndarray]:
    path = args.data_dir / "imdb" / f"{split}.jsonl.gz"
    if not path.is_file():
        raise SystemExit(f"error: {path} does not exist (--data-dir)")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    lengths = model.tokenize([r["text"] for r in rows])[1]
    long_rows = [r for r, n in zip(rows, lengths) if n > args.longer_than]
    chosen = random.Random(0).sample(long_rows, min(count, len(long_rows)))
    return [r["text"] for r in chosen], np.array([r["label"] for r in chosen])


train_texts, train_labels = sample("train", args.train)
test_texts, test_labels = sample("test", args.test)
started = time.perf_counter()
train_vectors = model.embed(train_texts, batch_size=16).numpy()
test_vectors = model.embed(test_texts, batch_size=16).numpy()
seconds = time.perf_counter() - started
held = len(train_texts) // 5  # C chosen on the last fifth of the training vectors, never on test
scores = {}
for c in (0.1, 1.0, 10.0, 100.0):
    fitted = LogisticRegression(C=c, max_iter=2000).fit(train_vectors[held:], train_labels[held:])
    scores[c] = fitted.score(train_vectors[:held], train_labels[:held])
best = max(scores, key=lambda c: (scores[c], -c))
classifier = LogisticRegression(C=best, max_iter=2000).fit(train_vectors, train_labels)
result = {"model": args.model or "frozen MiniLM, chunk 510, mean pooling", "train": len(train_texts),
          "test": len(test_texts), "longer_than": args.longer_than, "vector_size": int(train_vectors.shape[1]),
          "C": best, "held_out_accuracy": scores[best],
          "test_accuracy": float(classifier.score(test_vectors, test_labels)),
          "embed_seconds": round(seconds, 1), "documents_per_second": round(len(train_texts + test_texts) / seconds, 2)}
if args.model:  # the model's own head on the same test documents
    predicted = [int(max(r["probabilities"], key=r["probabilities"].get) == model.label_names[1])
                 for r in model.predict(test_texts)]
    result["head_test_accuracy"] = float(np.mean(np.array(predicted) == test_labels))
print(json.dumps(result, indent=1))
if args.json:
    args.json.write_text(json.dumps(result, indent=1) + "\n")
