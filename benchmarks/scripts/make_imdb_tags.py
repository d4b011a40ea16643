"""Write a small multi-label dataset made from IMDb (../shared/data/imdb), for recipes/imdb_tags.yaml.

Each review gets the tags that hold for it, out of three (none is possible):
    positive   the review's sentiment label is positive
    extreme    its star rating is 1 or 10 (the strongest opinions)
    long       it is longer than 512 WordPiece tokens with [CLS]/[SEP] (the MiniLM tokenizer counts)
Splits: train (from IMDb train) and test (from IMDb test), seeded random subsets.

    python benchmarks/scripts/make_imdb_tags.py [--out runs/data/imdb_tags] [--train 4000] [--test 2000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from longbert.data.sources import resolve_data_path
from longbert.modeling.backbone import load_tokenizer

TAGS = ("positive", "extreme", "long")


def tags_of(row: dict, n_tokens: int) -> list[str]:
    tags = []
    if row["label"] == 1:
        tags.append("positive")
    if row["rating"] in (1, 10):
        tags.append("extreme")
    if n_tokens > 512:
        tags.append("long")
    return tags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/data/imdb_tags")
    parser.add_argument("--train", type=int, default=4000)
    parser.add_argument("--test", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    source = resolve_data_path("imdb")
    if source is None:
        raise SystemExit("IMDb not found: set LONGBERT_DATA_DIR to a folder holding imdb/")
    tokenizer = load_tokenizer("minilm")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    for split, size in (("train", args.train), ("test", args.test)):
        with gzip.open(source / f"{split}.jsonl.gz", "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        rows = rng.sample(rows, size)
        lengths = [len(ids) + 2 for ids in tokenizer([r["text"] for r in rows], add_special_tokens=False)["input_ids"]]
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for row, n in zip(rows, lengths):
                f.write(json.dumps({"text": row["text"], "tags": tags_of(row, n)}) + "\n")
        counts = {t: sum(t in tags_of(r, n) for r, n in zip(rows, lengths)) for t in TAGS}
        print(f"{out / (split + '.jsonl')}: {size} reviews; tag counts {counts}")


if __name__ == "__main__":
    main()
