"""Where a trained model looks on the majority probe: how much of its pooler's weight falls on the units (126-token
windows, spans) that hold one of the three reviews, against the filler news around them. A pooler that learned where
to look puts its weight on the reviews; one that did not spreads it as the units come.

For each predictions file (a run's predictions-test.jsonl, or a committed .jsonl.gz; its rows carry `unit_weights`,
what an attention, max or gated pooler gave each unit), every document is tokenized as longbert tokenizes it, each
review's tokens are found from the word offsets the probe recorded (benchmarks/scripts/make_reach_probe.py --task
majority), and the units are cut as the strategy cuts them (`window_spans`: --window tokens every --stride, the first
--max-tokens content tokens). Printed per file, as means over its documents:

    on reviews      the pooler's weight on the units that overlap a review
    if even         the share of units that overlap a review: what equal weights would put there
    top unit        how often the unit with the largest weight overlaps a review
    first / middle / last   the weight on the units overlapping each review

    python benchmarks/scripts/where_it_looks.py PREDICTIONS... [--probe runs/data/reach_majority/test.jsonl]
        [--window 126] [--stride WINDOW] [--max-tokens N] [--tokenizer minilm] [--json F]

The numbers describe a pooler's weights, not what the units' vectors hold; they pair with the files' accuracies.
A missing or malformed file, or units that do not match the windows, is one error line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from longbert.errors import LongbertError
from longbert.evaluation.predictions import read_prediction_rows

POSITIONS = ("first", "middle", "last")


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def review_token_ranges(document: dict, offsets: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The content-token range [start, end) of each review: the tokens whose characters lie in its words."""
    words = [m.span() for m in re.finditer(r"\S+", document["text"])]
    ranges = []
    for start, length in zip(document["review_starts"], document["review_words"], strict=True):
        first, last = words[start][0], words[start + length - 1][1]
        inside = [i for i, (a, b) in enumerate(offsets) if a < last and b > first]
        ranges.append((inside[0], inside[-1] + 1))
    return ranges


def looked_at(weights: list[float], spans: list[list[tuple[int, int]]], reviews: list[tuple[int, int]]) -> dict:
    """One document's numbers (see the module's doc) from its units' weights, their token spans and the reviews'."""
    def overlaps(unit, review):
        return any(a < review[1] and b > review[0] for a, b in unit)

    total = sum(weights) or 1.0
    holds = [[overlaps(unit, review) for review in reviews] for unit in spans]
    on_any = [any(h) for h in holds]
    top = max(range(len(weights)), key=weights.__getitem__)
    return {"on reviews": sum(w for w, h in zip(weights, on_any) if h) / total,
            "if even": sum(on_any) / len(on_any), "top unit": float(on_any[top]),
            **{p: sum(w for w, h in zip(weights, holds) if h[k]) / total for k, p in enumerate(POSITIONS)}}


def read_file(path: Path) -> list:
    try:
        rows = read_prediction_rows(path)
    except (LongbertError, OSError, ValueError) as error:
        fail(f"{path}: {error}")
    if not rows or any(row.unit_weights is None or row.id is None for row in rows):
        fail(f"{path}: its rows have no unit_weights or no id (a run of a multi-unit strategy with attention, max "
             "or gated pooling writes them)")
    return rows


def probe_by_id(probe: Path) -> dict[str, dict]:
    from majority_ceiling import probe_documents  # a script beside this one: python puts its folder on the path

    return {row["id"]: row for row in probe_documents(probe, None, None)}


def summarise(path: Path, probe: dict[str, dict], tokenizer, args) -> dict:
    from longbert.strategies.windows import window_spans

    per_document = []
    for row in read_file(path):
        if row.id not in probe:
            fail(f"{path}: document {row.id} is not in {args.probe}")
        document = probe[row.id]
        encoded = tokenizer(document["text"], add_special_tokens=False, return_offsets_mapping=True,
                            verbose=False)
        if len(encoded["input_ids"]) + 2 != row.n_tokens:
            fail(f"{path}: document {row.id} has {row.n_tokens} tokens there and "
                 f"{len(encoded['input_ids']) + 2} with --tokenizer {args.tokenizer}: another tokenizer made it")
        read = min(len(encoded["input_ids"]), args.max_tokens or len(encoded["input_ids"]))
        spans = window_spans(read, args.window, args.stride or args.window)
        if len(spans) != len(row.unit_weights):
            fail(f"{path}: document {row.id} has {len(row.unit_weights)} unit weights and {len(spans)} windows of "
                 f"{args.window} tokens: give the run's --window, --stride and --max-tokens")
        reviews = review_token_ranges(document, encoded["offset_mapping"])
        per_document.append(looked_at(row.unit_weights, spans, reviews))
    keys = per_document[0].keys()
    return {"file": str(path), "documents": len(per_document),
            **{k: sum(d[k] for d in per_document) / len(per_document) for k in keys}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("predictions", nargs="+", type=Path)
    parser.add_argument("--probe", type=Path, default=Path("runs/data/reach_majority/test.jsonl"))
    parser.add_argument("--window", type=int, default=126)
    parser.add_argument("--stride", type=int, default=None)
    parser.add_argument("--max-tokens", type=int, default=None, help="content tokens read (bigbird: max_tokens - 2)")
    parser.add_argument("--tokenizer", default="minilm")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    probe = probe_by_id(args.probe)
    from transformers import AutoTokenizer

    from longbert.modeling.backbone import resolve_backbone

    try:
        tokenizer = AutoTokenizer.from_pretrained(resolve_backbone(args.tokenizer))
    except (LongbertError, OSError, ValueError) as error:
        fail(f"--tokenizer {args.tokenizer}: {error}")
    results = [summarise(path, probe, tokenizer, args) for path in args.predictions]
    print(f"{'file':<60} {'docs':>5} {'on reviews':>10} {'if even':>8} {'top unit':>8}  first / middle / last")
    for r in results:
        print(f"{Path(r['file']).name:<60} {r['documents']:>5} {r['on reviews']:>10.3f} {r['if even']:>8.3f} "
              f"{r['top unit']:>8.3f}  {r['first']:.3f} / {r['middle']:.3f} / {r['last']:.3f}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
