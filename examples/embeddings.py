"""Document vectors from a longbert model: find a document's nearest neighbours, and fit a classifier of your own.

    python examples/embeddings.py                      # the packaged MiniLM, untrained: the mean of its chunk vectors
    python examples/embeddings.py --model runs/examples/train_and_predict      # a model you trained (or any saved one)
    longbert embed MODEL documents.jsonl -o vectors.npy                        # the same vectors, from the command line

A document of any length becomes one vector: the one the model's head reads. --set takes recipe settings for the
untrained model (--set strategy.window=254).
"""
import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score

import longbert

DOCUMENTS = {
    "sport": ["The home side scored twice in the last ten minutes to win the cup final.",
              "She ran the marathon in under three hours, a club record.",
              "The coach rested his best players before the away match on Sunday.",
              "Rain stopped play after forty overs, and the match was drawn."],
    "cooking": ["Fry the onions slowly in butter until they are soft and golden.",
                "Knead the dough for ten minutes, then leave it to rise in a warm place.",
                "Season the soup with salt, pepper and a little lemon juice before serving.",
                "Roast the vegetables in a hot oven with olive oil and garlic."],
    "finance": ["The central bank raised interest rates by a quarter of a point.",
                "Shares in the company fell after it cut its profit forecast.",
                "The fund moved part of its savings from bonds into property.",
                "Inflation eased last month as fuel prices came down."],
}

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe setting for the untrained model (repeatable)")
parser.add_argument("--model", default=None, help="a saved model or run folder (default: untrained MiniLM)")
args = parser.parse_args()

try:
    if args.model:
        model = longbert.LongDocumentClassifier.from_pretrained(args.model)
    else:  # no training: MiniLM reads each chunk, and the document vector is the mean of the chunk vectors
        recipe = longbert.load_recipe(None, ["strategy.name=chunk", "strategy.pooling=mean", *args.settings])
        model = longbert.LongDocumentClassifier.from_recipe(recipe, list(DOCUMENTS))
except longbert.LongbertError as error:  # not a model folder, or a bad setting
    raise SystemExit(f"error: {error}") from None

texts = [text for topic in DOCUMENTS.values() for text in topic]
topics = [name for name, topic in DOCUMENTS.items() for _ in topic]
vectors = model.embed(texts).numpy()  # (documents, hidden size), float32
print(f"{len(texts)} documents -> vectors of {vectors.shape[1]}")

# Nearest neighbours by cosine similarity: normalise, then a dot product.
unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
query = "Whisk the eggs with sugar and fold in the flour."
query_vector = model.embed([query]).numpy()[0]
similarity = unit @ (query_vector / np.linalg.norm(query_vector))
print(f"nearest to {query!r}:")
for index in np.argsort(-similarity)[:3]:
    print(f"  {similarity[index]:.3f}  [{topics[index]}] {texts[index]}")

# A classifier of your own over the vectors; 4-fold cross-validation, one document of each topic held out per fold.
scores = cross_val_score(LogisticRegression(max_iter=1000), vectors, topics, cv=4)
print(f"topic classifier on the vectors: {scores.mean():.2f} accuracy (4-fold cross-validation)")
