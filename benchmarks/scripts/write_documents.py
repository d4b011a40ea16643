"""Write the documents a recipe draws (its training, validation and test documents after carving, subsampling and
length selection) as a data folder, so that a machine without the recipe's data (a lent GPU, say) reads exactly them.

    python benchmarks/scripts/write_documents.py recipes/compare/imdb.yaml runs/data/imdb_reader
    longbert compare --recipe recipes/compare/imdb.yaml --set data.path=runs/data/imdb_reader ...
        # elsewhere: the same documents in the same order, so its predictions pair with this machine's

The folder holds train.jsonl.gz, validation.jsonl.gz and test.jsonl.gz (text, label by name, and id where the data
has ids) and a metadata.json naming the classes in the recipe's order. Each split is at most its recipe limit and
every test document passes the length selection already, so the recipe's own limits draw every document again, in
the order written. Arguments after the folder are recipe overrides, as `longbert train --set` takes them. The folder
must not exist yet, or be empty: nothing in it is replaced.
"""
import argparse
import gzip
import json
import shutil
import tempfile
from pathlib import Path

import longbert
from longbert.config.recipe import is_multi_label
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.modeling.backbone import load_tokenizer

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("recipe")
parser.add_argument("output", type=Path, help="the data folder to write (new, or empty)")
parser.add_argument("overrides", nargs="*", help="recipe overrides, key=value")
args = parser.parse_args()

if args.output.exists() and (not args.output.is_dir() or any(args.output.iterdir())):
    raise SystemExit(f"error: {args.output} exists and is not an empty folder; name a new one")
try:
    recipe = longbert.load_recipe(args.recipe, args.overrides)
    multi_label = is_multi_label(recipe.model.problem_type)
    corpus = load_corpus(recipe.data, load_tokenizer(recipe.backbone.name), recipe.seed, multi_label)
except LongbertError as error:
    raise SystemExit(f"error: {error}") from None

names = corpus.label_names


def label_of(encoded):
    """The label as the data gives it back: a class name, or a list of them (multi-label)."""
    if multi_label:
        return [names[i] for i, on in enumerate(encoded) if on]
    return names[encoded]


# Written beside the output and moved into place at the end, so that an interrupted run leaves no half a folder.
args.output.parent.mkdir(parents=True, exist_ok=True)
staging = Path(tempfile.mkdtemp(prefix=f".{args.output.name}.", dir=args.output.parent))
try:
    for role, split in corpus.splits.items():
        ids = split["id"] if "id" in split.column_names else None
        with gzip.open(staging / f"{role}.jsonl.gz", "wt", encoding="utf-8") as stream:
            for i, (text, encoded) in enumerate(zip(split["text"], split["labels"])):
                row = {"text": text, "label": label_of(encoded)} | ({"id": ids[i]} if ids is not None else {})
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"{role}: {len(split)} documents")
    (staging / "metadata.json").write_text(json.dumps({"label_names": names, "written_from": args.recipe,
                                                        "overrides": args.overrides}, indent=1) + "\n")
    if args.output.exists():
        args.output.rmdir()  # empty, checked above
    staging.rename(args.output)
except BaseException:
    shutil.rmtree(staging, ignore_errors=True)  # only what this run wrote
    raise
print(f"wrote {args.output}")
