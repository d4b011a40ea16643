"""train.self_training_documents: a teacher (the recipe without self-training, in run_dir/self_training) labels
documents of data.unlabelled_split; those it labels confidently, balanced over the classes, join the run's training
documents, and validation and test stay as they were."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import longbert
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.training.self_training import choose_confident


def test_confident_rows_are_kept_as_many_per_class_as_the_rarest_has():
    probabilities = np.array([[0.95, 0.05], [0.99, 0.01], [0.6, 0.4], [0.2, 0.8], [0.92, 0.08], [0.05, 0.95]])
    # class 0 confident: rows 1 (0.99), 0 (0.95), 4 (0.92); class 1: 5 (0.95) only (row 3's 0.8 is under 0.9)
    assert choose_confident(probabilities, 0.9) == [1, 5], "the most confident of class 0, and class 1's one"
    assert choose_confident(probabilities, 0.75) == [0, 1, 3, 5], "two a class, in row order"
    assert choose_confident(probabilities, 0.999) == [], "a class with none confident: nothing is kept"


@pytest.mark.heavy
def test_the_teachers_confident_labels_join_the_training_documents(tiny_recipe, monkeypatch):
    # A tiny random-weight teacher labels everything alike; this one is sure of a third of the documents for each
    # class and unsure of the last third, so that what is kept is known.
    def predict(self, texts, batch_size=16, precision="auto"):
        sure = [0.97, 0.02, 0.6]
        return [{"probabilities": {"neg": sure[i % 3], "pos": 1 - sure[i % 3]}} for i in range(len(texts))]

    monkeypatch.setattr(LongDocumentClassifier, "predict", predict)
    recipe = longbert.load_recipe(None, tiny_recipe + [
        "model.finetune=frozen", "train.frozen_head_epochs=2", "data.unlabelled_split=test",
        "train.self_training_documents=24", "train.self_training_threshold=0.9"])
    metrics = longbert.train(recipe).metrics
    teacher = Path(recipe.output_dir) / "self_training"
    summary = metrics["self_training"]
    rows = [json.loads(line) for line in (teacher / "pseudo-labels.jsonl").read_text().splitlines()]
    assert summary["unlabelled"] == 24 and summary["kept"] == len(rows) == 16
    assert summary["per_class"] == {"neg": 8, "pos": 8}
    assert all(r["confidence"] == 0.98 if r["label"] else r["confidence"] == 0.97 for r in rows)
    assert all(r["label_name"] == ["neg", "pos"][r["label"]] for r in rows)
    teacher_metrics = json.loads((teacher / "metrics.json").read_text())
    assert "test" not in teacher_metrics and "self_training" not in teacher_metrics
    labelled = teacher_metrics["data"]["train"]["documents"]
    assert metrics["data"]["train"]["documents"] == labelled
    assert metrics["data"]["train"]["pseudo_labelled"] == len(rows)
    assert metrics["steps"] == 2 * math.ceil((labelled + len(rows)) / 8), "the student's epochs read both"
    assert teacher_metrics["steps"] == 2 * math.ceil(labelled / 8)
    assert metrics["data"]["validation"] == teacher_metrics["data"]["validation"], "validation is untouched"
    assert metrics["train_seconds"] > summary["train_seconds"] > 0 and "test" in metrics


@pytest.mark.parametrize("settings, message", [
    (["train.self_training_documents=10"], "train.self_training_documents needs data.unlabelled_split"),
    (["train.self_training_documents=-1"], "train.self_training_documents must be >= 0"),
    (["train.self_training_threshold=1"], "train.self_training_threshold must be in \\(0, 1\\)"),
    (["train.self_training_documents=10", "data.unlabelled_split=unsupervised", "model.problem_type=multi_label"],
     "train.self_training_documents is for single-label problems"),
])
def test_bad_self_training_settings_are_named(settings, message):
    with pytest.raises(LongbertError, match=message):
        longbert.load_recipe(None, settings)


@pytest.mark.heavy
def test_an_unlabelled_split_that_is_not_there_is_one_line(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + [
        "model.finetune=frozen", "train.frozen_head_epochs=1", "data.unlabelled_split=nowhere",
        "train.self_training_documents=4"])
    with pytest.raises(LongbertError, match="nowhere"):
        longbert.train(recipe)
