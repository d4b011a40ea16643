"""Two `longbert predict` outputs of the same texts against each other (label agreement, the largest probability
difference), and each against the labels of the input file when it has them. For the end-to-end predict timing of
docs/benchmarks.md: torch eager against `--runtime openvino` over all 25,000 IMDb test reviews.

    /usr/bin/time -v longbert predict runs/imdb_quick ../shared/data/imdb/test.jsonl.gz -o torch.jsonl
    /usr/bin/time -v longbert predict runs/imdb_quick ../shared/data/imdb/test.jsonl.gz --runtime openvino \
        -o openvino.jsonl
    python benchmarks/scripts/predict_agreement.py torch.jsonl openvino.jsonl --gold ../shared/data/imdb/test.jsonl.gz \
        --label-names neg,pos
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path


def rows(path: Path) -> list[dict]:
    opened = gzip.open(path, "rt") if path.suffix == ".gz" else path.open()
    with opened as lines:
        return [json.loads(line) for line in lines if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--gold", type=Path, help="the input file, whose `label` column holds class indices")
    parser.add_argument("--label-names", help="the class names in index order, comma-separated")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    first, second = rows(args.first), rows(args.second)
    if [r["id"] for r in first] != [r["id"] for r in second]:
        raise SystemExit("error: the two outputs are not of the same texts in the same order")
    agree = sum(a["label"] == b["label"] for a, b in zip(first, second))
    largest = max(abs(a["probabilities"][k] - b["probabilities"][k]) for a, b in zip(first, second)
                  for k in a["probabilities"])
    out = {"texts": len(first), "labels_agree": agree / len(first), "labels_differ": len(first) - agree,
           "max_abs_probability_difference": largest}
    if args.gold:
        names = args.label_names.split(",")
        gold = [names[r["label"]] for r in rows(args.gold)]
        for name, predicted in ((args.first.name, first), (args.second.name, second)):
            out[f"accuracy {name}"] = sum(p["label"] == g for p, g in zip(predicted, gold)) / len(gold)
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
