"""`train.self_training_documents`: self-training on confident pseudo-labels, the use of the unlabelled documents a
user usually has (Scudder 1965; Yarowsky 1995; with pretrained encoders, Du et al. 2021, "Self-training Improves
Pre-training for Natural Language Understanding").

    summary = train_teacher(recipe, run_dir, source, stop, run)  # run_dir/self_training: the teacher, its labels
    corpus = add_pseudo_labelled(corpus, run_dir / "self_training" / PSEUDO_FILE, tokenizer, data)  # grown

The run first trains a teacher: the same recipe without self-training, in run_dir/self_training, on the run's own
split less its test documents (the test measures the finished model). The teacher reads `self_training_documents`
documents drawn (seeded) from `data.unlabelled_split` and keeps those it labels with a probability of at least
`self_training_threshold`, as many of each class as of the rarest (so the pseudo-labels do not tilt the classes), in
run_dir/self_training/pseudo-labels.jsonl, which a person can read. The run itself, the student, then trains on its
labelled documents and those, from the same start as the teacher (the backbone, train.init_from, a contrastive
stage); validation and test are untouched, so the kept model is still chosen on labelled documents. Single-label
problems only.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np
from datasets import Dataset, concatenate_datasets

from longbert.data.documents import tokenize_cached
from longbert.data.sources import load_raw_splits
from longbert.errors import LongbertError
from longbert.training.checkpoint import is_finished
from longbert.training.start_or_resume import open_run
from longbert.utils.atomic import atomic_stream, json_text, write_text_atomically
from longbert.utils.folders import CHECKPOINT, PSEUDO_FILE, SELF_TRAINING, SELF_TRAINING_SUMMARY
from longbert.utils.logs import get_logger


def teacher_recipe(recipe, run_dir: Path):
    """The teacher's recipe: the run's, without self-training or a contrastive stage (it starts where the run's
    stages left the model), in run_dir/self_training; it reads the run's documents (split once by the run) less the
    test split."""
    return dataclasses.replace(recipe, output_dir=str(run_dir / SELF_TRAINING),
                               train=dataclasses.replace(recipe.train, self_training_documents=0,
                                                         contrastive_pairs=0),
                               data=dataclasses.replace(recipe.data, test_split=None))


def choose_confident(probabilities: np.ndarray, threshold: float) -> list[int]:
    """Rows of (N, C) `probabilities` whose top class has probability >= `threshold`, the most confident first within
    each class, cut to the count of the class with fewest such rows (every class equally many; none when a class has
    none). Returned in row order."""
    predicted = probabilities.argmax(1)
    confidence = probabilities.max(1)
    by_class = []
    for c in range(probabilities.shape[1]):
        rows = np.flatnonzero((predicted == c) & (confidence >= threshold))
        by_class.append(rows[np.argsort(-confidence[rows], kind="stable")])
    keep = min(len(rows) for rows in by_class)
    return sorted(int(r) for rows in by_class for r in rows[:keep])


def unlabelled_texts(data, count: int, seed: int, documents=None) -> list[str]:
    """`count` texts drawn (seeded) from data.unlabelled_split (all of them when it has fewer); empty ones left out.
    `documents`: the object in memory the run was given instead of data.path, if any (the split is one of its)."""
    split = data.unlabelled_split
    raw, _ = load_raw_splits(data, [split], source=documents)
    table = raw[split]
    if data.text_column not in table.column_names:
        raise LongbertError(f"data.unlabelled_split {split!r} has no text column {data.text_column!r}; columns: "
                            f"{', '.join(table.column_names)}")
    rows = np.random.default_rng([seed, 7]).permutation(len(table))[:count]
    texts = table.select(np.sort(rows))[data.text_column]
    return [t for t in texts if isinstance(t, str) and t.strip()]


def train_teacher(recipe, run_dir: Path, source, stop, run: Callable, data=None) -> dict:
    """Train the teacher (or read it where a resumed run finished it) and write its pseudo-labels. `run(recipe,
    resume, source) -> TrainResult` trains a recipe through the run's Trainer; the teacher labels in memory. Returns
    what the run records of the stage: {train_seconds (the teacher's training and labelling), unlabelled, kept,
    per_class, threshold, teacher_validation}. `data`: the documents in memory that `train` was given, if any."""
    teacher = teacher_recipe(recipe, run_dir)
    folder = Path(teacher.output_dir)
    if (folder / SELF_TRAINING_SUMMARY).is_file():
        return json.loads((folder / SELF_TRAINING_SUMMARY).read_text())
    log = get_logger(__name__)
    log.info(f"train.self_training_documents: a teacher first, in {folder}; its confident labels then join the "
             "training documents")
    with open_run(folder, teacher, is_finished(folder / CHECKPOINT), stop) as resuming:
        result = run(teacher, resuming, source)
    record, model = result.record, result.classifier
    started = time.perf_counter()
    texts = unlabelled_texts(recipe.data, recipe.train.self_training_documents, recipe.seed, data)
    rows = model.predict(texts, batch_size=recipe.eval.batch_size)
    names = model.label_names
    probabilities = np.array([[row["probabilities"][name] for name in names] for row in rows])  # (N, C)
    kept = choose_confident(probabilities, recipe.train.self_training_threshold)
    with atomic_stream(folder / PSEUDO_FILE) as out:
        for r in kept:
            label = int(probabilities[r].argmax())
            out.write(json.dumps({"text": texts[r], "label": label, "label_name": names[label],
                                  "confidence": round(float(probabilities[r].max()), 6)}) + "\n")
    per_class = {names[c]: int(sum(probabilities[r].argmax() == c for r in kept)) for c in range(len(names))}
    summary = {"train_seconds": record.train_seconds + time.perf_counter() - started, "unlabelled": len(texts),
               "kept": len(kept), "per_class": per_class, "threshold": recipe.train.self_training_threshold,
               "teacher_validation": record.best_validation, "best_metric": record.best_metric}
    write_text_atomically(folder / SELF_TRAINING_SUMMARY, json_text(summary, SELF_TRAINING_SUMMARY, indent=2))
    log.info(f"self-training: {len(kept)} of {len(texts)} unlabelled documents kept as pseudo-labelled "
             f"({', '.join(f'{n} {k}' for k, n in per_class.items())}) at probability >= "
             f"{recipe.train.self_training_threshold}")
    return summary


def add_pseudo_labelled(corpus, pseudo_labels: Path, tokenizer, data):
    """The corpus with the teacher's pseudo-labelled documents (the file `pseudo_labels`) after its training
    documents, tokenized as they are; corpus.stats['train'] says how many (`pseudo_labelled`)."""
    lines = pseudo_labels.read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    train = corpus.splits["train"]
    if not rows:
        corpus.stats["train"]["pseudo_labelled"] = 0
        return corpus
    texts = [r["text"] for r in rows]
    ids, lengths = tokenize_cached(tokenizer, texts, data.max_document_tokens)
    columns = {"text": texts, "input_ids": ids, "labels": [r["label"] for r in rows], "n_tokens": lengths}
    if "id" in train.column_names:
        columns["id"] = [f"{data.unlabelled_split}:pseudo{i}" for i in range(len(rows))]
    added = Dataset.from_dict({k: columns[k] for k in train.column_names}, features=train.features)
    corpus.splits["train"] = concatenate_datasets([train, added])
    corpus.stats["train"]["pseudo_labelled"] = len(rows)
    return corpus
