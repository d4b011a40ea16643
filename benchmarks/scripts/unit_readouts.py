"""Other readings of a trained multi-unit model's units: does the model know more, unit by unit, than its pooler
says? Every unit (a chunk, a window, a segment, a span) is classified by the model's own head (as the unit loss
trains it, `LongDocumentClassifier.unit_loss`), and the document's label is read from those unit labels in four ways:

    model        the model's own prediction (its pooler, then the head)
    mean logit   the mean of the units' logits (with a linear head: mean pooling of the same units)
    soft vote    the mean of the units' probabilities
    sure vote    the units whose top probability reaches a threshold each vote for their class, the most votes win (a
                 tie, or no sure unit: the model's own prediction); the threshold is chosen on the validation file

A reading is chosen on validation only; the test file is read once with every reading, for the record.

    python benchmarks/scripts/unit_readouts.py MODEL_DIR --validation V.jsonl --test T.jsonl
        [--test-ids-from P.jsonl.gz] [--validation-documents 500] [--json F]

MODEL_DIR: a single model folder of a multi-unit strategy (not an ensemble or hybrid). The files: JSON lines with
id, text and label (an index into the model's label names), as benchmarks/scripts/make_reach_probe.py writes them.
--test-ids-from: only the test documents named in a predictions file (e.g. the run's own predictions-test.jsonl),
so that the numbers pair with it. A missing or malformed file is one error line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from longbert.errors import LongbertError
from longbert.evaluation.predictions import read_prediction_rows

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_documents(file: Path, ids: list[str] | None, count: int | None) -> list[dict]:
    if not file.is_file():
        fail(f"{file} is not a file")
    try:
        rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        fail(f"{file} cannot be read as JSON lines: {error}")
    if any(not {"id", "text", "label"} <= set(row) for row in rows):
        fail(f"{file}: every row needs id, text and label")
    if ids is None:
        return rows[:count]
    by_id = {row["id"]: row for row in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        fail(f"{len(missing)} documents named in --test-ids-from are not in {file}, e.g. {missing[0]}")
    return [by_id[i] for i in ids]


def unit_outputs(model, documents: list[dict], batch_size: int) -> list[dict]:
    """Per document: the model's probabilities (C,) and its units' probabilities and logits (N, C), float32."""
    from longbert.utils.hardware import autocast_for

    tokens, _ = model.tokenize([d["text"] for d in documents])
    out = []
    model.eval()
    for start in range(0, len(tokens), batch_size):
        batch = tokens[start:start + batch_size]
        with torch.no_grad(), autocast_for(model, "auto"):
            units = model.encode(batch)
            logits = model(units=units).logits.float()  # (B, C): the model's own reading of these units
            unit_logits = model.head(units.vectors).float()  # (B, N, C): each unit through the same head
        for k in range(len(batch)):
            kept = units.mask[k]
            out.append({"probabilities": logits[k].softmax(-1), "unit_logits": unit_logits[k][kept],
                        "unit_probabilities": unit_logits[k][kept].softmax(-1)})
    return out


def readings(outputs: list[dict], threshold: float) -> dict[str, list[int]]:
    def sure_vote(o: dict) -> int:
        sure = o["unit_probabilities"].max(-1)
        votes = torch.bincount(sure.indices[sure.values >= threshold], minlength=o["probabilities"].shape[0])
        top = votes.topk(2).values if votes.numel() > 1 else votes
        if votes.sum() == 0 or (top.numel() > 1 and top[0] == top[1]):
            return int(o["probabilities"].argmax())
        return int(votes.argmax())

    return {"model": [int(o["probabilities"].argmax()) for o in outputs],
            "mean logit": [int(o["unit_logits"].mean(0).argmax()) for o in outputs],
            "soft vote": [int(o["unit_probabilities"].mean(0).argmax()) for o in outputs],
            "sure vote": [sure_vote(o) for o in outputs]}


def accuracy(predicted: list[int], documents: list[dict]) -> float:
    return sum(p == d["label"] for p, d in zip(predicted, documents)) / len(documents)


def by_group(predicted: list[int], documents: list[dict]) -> dict[str, float]:
    groups: dict[str, list[bool]] = {}
    for p, d in zip(predicted, documents):
        groups.setdefault(d["id"].rsplit("-", 1)[0], []).append(p == d["label"])
    return {g: sum(v) / len(v) for g, v in sorted(groups.items())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--validation", type=Path, required=True)
    parser.add_argument("--test", type=Path, required=True)
    parser.add_argument("--test-ids-from", type=Path, default=None)
    parser.add_argument("--validation-documents", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    ids = None
    if args.test_ids_from is not None:
        try:
            ids = [row.id for row in read_prediction_rows(args.test_ids_from)]
        except (LongbertError, OSError) as error:
            fail(f"--test-ids-from: {error}")
    validation = read_documents(args.validation, None, args.validation_documents)
    test = read_documents(args.test, ids, None)

    from longbert.modeling.classifier import LongDocumentClassifier

    try:
        model = LongDocumentClassifier.from_pretrained(args.model_dir)
    except (LongbertError, OSError) as error:
        fail(f"{args.model_dir}: {error}")
    if model.ensemble is not None or model.lexical is not None or model.multi_label:
        fail(f"{args.model_dir} is an ensemble, a hybrid or multi-label: give a single-label model of one strategy")
    seen = {"validation": unit_outputs(model, validation, args.batch_size),
            "test": unit_outputs(model, test, args.batch_size)}
    threshold = max(THRESHOLDS, key=lambda t: accuracy(readings(seen["validation"], t)["sure vote"], validation))
    result = {"model": str(args.model_dir), "sure_vote_threshold": threshold}
    for split, documents in (("validation", validation), ("test", test)):
        read = readings(seen[split], threshold)
        result[split] = {"documents": len(documents),
                         "accuracy": {name: accuracy(p, documents) for name, p in read.items()},
                         "by_group": {name: by_group(p, documents) for name, p in read.items()},
                         "units_per_document": sum(len(o["unit_logits"]) for o in seen[split]) / len(documents)}
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
