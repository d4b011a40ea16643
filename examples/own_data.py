"""Train on your own file of labelled texts with one command, then classify new texts with the model.

    python examples/own_data.py                     # writes a small made-up reviews.csv, then trains on it
    python examples/own_data.py my_texts.jsonl      # your own file: csv, tsv, jsonl or parquet
    python examples/own_data.py --set train.epochs=1 --set strategy.name=sliding    # any recipe setting

The one line it runs is the one you would type:

    longbert train --set data.path=reviews.csv

The file needs a `text` and a `label` column (other names: --set data.text_column=body). longbert cuts it into test
(10%), validation (10% of the rest) and training documents, seeded and stratified by label, and writes the cut into
the run folder (data-split.json). The run folder is named after the file: runs/reviews for reviews.csv. The backbone
is MiniLM unless --backbone names another (a local folder or a hub id); on a CPU the sample trains in a few minutes.
"""
import argparse
import csv
import json
import random
import shlex
import subprocess
import sys
from pathlib import Path

import longbert

GOOD = ["A wonderful film.", "The acting is superb.", "I would gladly see it again.", "The ending moved me.",
        "Every scene is beautifully shot.", "A joy from start to finish."]
BAD = ["A dull, tiresome film.", "The acting is wooden.", "I wanted my money back.", "The plot makes no sense.",
       "Every scene drags on.", "A chore from start to finish."]
PLOT = ["The story opens in a small harbour town.", "A letter from an old friend arrives in winter.",
        "The brothers argue about the family boat.", "The second act moves to the capital.",
        "The mayor has plans of his own for the harbour.", "Much of it was shot over one summer."]


def write_sample(path: Path, count: int = 40, seed: int = 0) -> None:
    """A csv of `count` short made-up reviews, half of them pos and half neg: a few plot sentences and two verdicts."""
    rng = random.Random(seed)
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        for i in range(count):
            label = ["pos", "neg"][i % 2]
            sentences = rng.sample(PLOT, k=3) + rng.sample(GOOD if label == "pos" else BAD, k=2)
            rng.shuffle(sentences)
            writer.writerow([" ".join(sentences), label])


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("file", nargs="?", help="your labelled texts (default: write a sample reviews.csv here)")
parser.add_argument("--backbone", help="a model folder or hub id to start from (default: MiniLM)")
parser.add_argument("--set", dest="settings", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe setting, as `longbert train --set` takes it (repeatable)")
args = parser.parse_args()

data = Path(args.file) if args.file else Path("reviews.csv")
if not args.file:
    write_sample(data)
    print(f"wrote {data}: 40 made-up reviews (columns text, label)")
settings = [f"data.path={data}"] + ([f"backbone.name={args.backbone}"] if args.backbone else []) + args.settings

# The one-line command, run as you would type it (`python -m longbert.cli` is the same program as `longbert`).
command = [arg for setting in settings for arg in ("--set", setting)]
print("$ " + shlex.join(["longbert", "train", *command]))
trained = subprocess.run([sys.executable, "-m", "longbert.cli", "train", *command], stdout=subprocess.PIPE, text=True)
print(trained.stdout, end="")
if trained.returncode:
    raise SystemExit(trained.returncode)  # the command printed its one-line error already
run_dir = Path(trained.stdout.split("run folder: ", 1)[1].splitlines()[0])

cut = json.loads((run_dir / "data-split.json").read_text())
print(f"the cut of {cut['source']} (seed {cut['seed']}): "
      + ", ".join(f"{len(rows)} {split}" for split, rows in cut["rows"].items()) + f" ({run_dir}/data-split.json)")

# The run folder's kept model (the best on validation), loaded as any saved model is; or on the command line:
#   longbert predict runs/reviews new_texts.txt
model = longbert.LongDocumentClassifier.from_pretrained(run_dir)
new_texts = [" ".join(PLOT[:3]) + " A wonderful film. The ending moved me.",
             "I wanted my money back. " + " ".join(PLOT[3:]) + " Every scene drags on."]
for text, row in zip(new_texts, model.predict(new_texts)):
    probabilities = ", ".join(f"{name} {p:.3f}" for name, p in row["probabilities"].items())
    print(f"{row['label']}  ({probabilities})  {row['n_tokens']} tokens: {text[:50]}...")
