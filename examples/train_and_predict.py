"""Train a long-document classifier on texts held in Python lists, then classify new texts with it.

    python examples/train_and_predict.py                              # MiniLM: about 4 minutes on 2 CPU cores
    python examples/train_and_predict.py --set train.epochs=1 --set strategy.name=sliding    # any recipe setting

--set takes any recipe setting, as `longbert train --set` does. The run folder (--output) keeps
the model: examples/pipeline.py, examples/serve_client.py and examples/embeddings.py read it. To train on your own
documents, replace `make_reviews` with your texts and labels (a label is a name or an index).
"""
import argparse
import random

import longbert

POSITIVE = ["A wonderful film.", "The acting is superb and the story moved me.", "I would gladly see it again."]
NEGATIVE = ["A dull, tiresome film.", "The acting is wooden and the plot makes no sense.", "I wanted my money back."]
PLOT = ["The story opens in a small harbour town.", "Its director made two features before this one.",
        "The second act moves to the capital.", "A letter from an old friend arrives in winter.",
        "The brothers argue about the family boat.", "The score was recorded with a small string band.",
        "Much of it was shot on location over one summer.", "The mayor has plans of his own for the harbour."]


def make_reviews(count: int, seed: int) -> tuple[list[str], list[str]]:
    """`count` made-up reviews of about 650 tokens each (MiniLM reads 512 at once): plot summary, with three verdict
    sentences anywhere in it."""
    rng = random.Random(seed)
    texts, labels = [], []
    for i in range(count):
        label = ["neg", "pos"][i % 2]
        sentences = rng.choices(PLOT, k=70) + rng.sample(POSITIVE if label == "pos" else NEGATIVE, k=3)
        rng.shuffle(sentences)
        texts.append(" ".join(sentences))
        labels.append(label)
    return texts, labels


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe setting, as `longbert train --set` takes it (repeatable)")
parser.add_argument("--output", default="runs/examples/train_and_predict", help="the run folder to write (a new one)")
parser.add_argument("--documents", type=int, default=120, help="how many training documents to make")
args = parser.parse_args()

try:
    # The default recipe (chunk strategy, MiniLM), with the run folder and your settings on top.
    recipe = longbert.load_recipe(None, [f"output_dir={args.output}", *args.settings])
    # A dict of splits: train (validation is carved from it) and test. A single (texts, labels) pair works too.
    data = {"train": make_reviews(args.documents, seed=0), "test": make_reviews(max(args.documents // 4, 4), seed=1)}
    result = longbert.train(recipe, data=data)
except longbert.LongbertError as error:  # a bad setting, or an output folder that holds a run already
    raise SystemExit(f"error: {error}") from None
print(f"test accuracy: {result.record.test['accuracy']:.3f} (run folder: {result.folder})")

# The run folder's kept model (the best on validation), loaded as any saved model is.
model = longbert.LongDocumentClassifier.from_pretrained(result.folder)
new_texts = [" ".join(PLOT * 8) + " A wonderful film, I would gladly see it again.",
             "I wanted my money back. " + " ".join(PLOT * 8)]
for text, row in zip(new_texts, model.predict(new_texts)):
    probabilities = ", ".join(f"{name} {p:.3f}" for name, p in row["probabilities"].items())
    print(f"{row['label']}  ({probabilities})  {row['n_tokens']} tokens: {text[:50]}...")
