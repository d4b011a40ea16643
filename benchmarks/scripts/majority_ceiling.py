"""What counting the majority probe's three reviews could give: a model that reads one review alone classifies each
review of the probe's test documents, cut out of the document at the word offsets the probe recorded
(benchmarks/scripts/make_reach_probe.py --task majority), and the reviews' labels are then combined in the ways a
document model might combine them:

    per review         how often the model gets one review right, alone (a, overall and by position)
    majority vote      the majority of its three labels: what reading every review and counting gives
    mean probability   the label of the mean of its three probabilities: counting with bounded votes, as a pooler that
                       averages per-unit probabilities (or tanh-bounded votes: `pooling: vote`) would
    mean logit         the label of the mean of its three logits: what a linear head over the mean of the review
                       vectors computes, where one confident review can outweigh two mild ones
    one review         its label for the first, the middle or the last review: what a model that reads one gives
                       (the last review agrees with the document's label in 3 of 4 documents, the first in 1 of 2)

With reviews read independently at accuracy a, a vote is right with probability a^2 + 2a(1-a)^2 (every probe document
has exactly one dissenting review: both majority reviews read right, or one of them and the dissenter both wrong), and
the last review alone with 3a/4 + (1-a)/4. Those two formulas are printed beside what was counted.

    python benchmarks/scripts/majority_ceiling.py MODEL_DIR [--probe runs/data/reach_majority/test.jsonl]
        [--ids-from PREDICTIONS.jsonl[.gz]] [--documents 1000] [--json F]

MODEL_DIR: any folder `longbert predict` loads. --ids-from: read the documents named in a predictions file (e.g. a
committed probe run's, so that the numbers pair with it), else the first --documents of the probe. Use it on a model
trained on single reviews (not the probe's documents): the numbers say what the backbone can read, not what a probe
model learned. A missing or malformed file is one error line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from longbert.errors import LongbertError
from longbert.evaluation.predictions import read_prediction_rows

POSITIONS = ("first", "middle", "last")


def fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def probe_documents(probe: Path, ids: list[str] | None, count: int) -> list[dict]:
    """The probe's documents, those named in `ids` (in that order) or the first `count`."""
    if not probe.is_file():
        fail(f"{probe} is not a file (python benchmarks/scripts/make_reach_probe.py --task majority writes it)")
    try:
        rows = [json.loads(line) for line in probe.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        fail(f"{probe} cannot be read as JSON lines: {error}")
    if any("review_starts" not in row for row in rows):
        fail(f"{probe} is not a majority probe: its rows have no review_starts")
    if ids is None:
        return rows[:count]
    by_id = {row["id"]: row for row in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        fail(f"{len(missing)} documents of --ids-from are not in {probe}, e.g. {missing[0]}")
    return [by_id[i] for i in ids]


def reviews_of(document: dict) -> list[str]:
    words = document["text"].split()
    return [" ".join(words[start:start + length])
            for start, length in zip(document["review_starts"], document["review_words"], strict=True)]


def counted(documents: list[dict], predicted: list[list[int]], positive: list[list[float]] | None = None) -> dict:
    """Accuracy per review (overall and by position), of the vote, of each single review against the label, and
    where `positive` gives each review's probability of class 1, of the mean probability and of the mean logit."""
    label = [d["label"] for d in documents]
    truth = [d["review_labels"] for d in documents]
    n = len(documents)
    per_position = {p: sum(pr[i] == t[i] for pr, t in zip(predicted, truth)) / n for i, p in enumerate(POSITIONS)}
    a = sum(per_position.values()) / 3
    vote = sum((sum(pr) >= 2) == bool(y) for pr, y in zip(predicted, label)) / n
    single = {p: sum(pr[i] == y for pr, y in zip(predicted, label)) / n for i, p in enumerate(POSITIONS)}
    return {"documents": n, "review_accuracy": a, "review_accuracy_by_position": per_position,
            "majority_vote": vote, "one_review": single, **averaged(documents, positive),
            "formula": {"majority_vote": a * a + 2 * a * (1 - a) ** 2, "last_review": 0.75 * a + 0.25 * (1 - a)}}


def averaged(documents: list[dict], positive: list[list[float]] | None) -> dict:
    """Accuracy of the label of the mean probability and of the mean logit of each document's three reviews."""
    if positive is None:
        return {}
    label = [bool(d["label"]) for d in documents]
    logit = [[math.log(max(p, 1e-12)) - math.log(max(1 - p, 1e-12)) for p in ps] for ps in positive]
    n = len(documents)
    return {"mean_probability": sum((sum(ps) / 3 >= 0.5) == y for ps, y in zip(positive, label)) / n,
            "mean_logit": sum((sum(ls) >= 0) == y for ls, y in zip(logit, label)) / n}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--probe", type=Path, default=Path("runs/data/reach_majority/test.jsonl"))
    parser.add_argument("--ids-from", type=Path, default=None)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    ids = None
    if args.ids_from is not None:
        try:
            ids = [row.id for row in read_prediction_rows(args.ids_from)]
        except (LongbertError, OSError) as error:
            fail(f"--ids-from: {error}")
    documents = probe_documents(args.probe, ids, args.documents)

    from longbert.modeling.classifier import LongDocumentClassifier

    try:
        model = LongDocumentClassifier.from_pretrained(args.model_dir)
    except (LongbertError, OSError) as error:
        fail(f"{args.model_dir}: {error}")
    names = model.label_names
    metadata = args.probe.parent / "metadata.json"
    probe_names = json.loads(metadata.read_text())["label_names"] if metadata.is_file() else names
    if list(names) != list(probe_names):
        fail(f"{args.model_dir} names its classes {names}, the probe {probe_names}: a sentiment model of the same "
             "classes is needed")
    texts = [review for document in documents for review in reviews_of(document)]
    rows = model.predict(texts, batch_size=args.batch_size)
    labels = [names.index(row["label"]) for row in rows]
    predicted = [labels[3 * i:3 * i + 3] for i in range(len(documents))]
    ones = [row["probabilities"][names[1]] for row in rows]
    positive = [ones[3 * i:3 * i + 3] for i in range(len(documents))]
    result = {"model": str(args.model_dir), "probe": str(args.probe), **counted(documents, predicted, positive)}
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
