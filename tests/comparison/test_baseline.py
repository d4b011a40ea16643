"""The TF-IDF + logistic regression baseline: C is chosen on validation, never on test, and its rows pair with the
strategies' prediction rows."""

from __future__ import annotations

import numpy as np
from datasets import Dataset

from longbert.comparison.baseline import C_GRID, prediction_rows, tfidf_baseline
from longbert.data.documents import Corpus

WORDS = {0: ["dull", "boring", "awful", "weak"], 1: ["great", "superb", "moving", "fine"]}


def _split(n: int, seed: int, flip: bool = False) -> Dataset:
    rng = np.random.default_rng(seed)
    labels = [int(i % 2) for i in range(n)]
    texts = [" ".join(rng.choice(WORDS[y] * 2 + ["film", "plot", "actor", "scene"] * 3, 12)) for y in labels]
    return Dataset.from_dict({"text": texts, "labels": [1 - y if flip else y for y in labels],
                              "n_tokens": [14] * n})


def test_c_is_chosen_on_validation_and_test_labels_change_only_the_test_score():
    corpus = Corpus({"train": _split(60, 0), "validation": _split(20, 1), "test": _split(20, 2)}, ["neg", "pos"],
                    False, {})
    flipped = Corpus({**corpus.splits, "test": _split(20, 2, flip=True)}, ["neg", "pos"], False, {})
    a, b = tfidf_baseline(corpus), tfidf_baseline(flipped)
    assert a["settings"]["C"] == b["settings"]["C"] and a["validation"] == b["validation"]
    assert set(a["validation"]) == {str(c) for c in C_GRID}
    assert np.allclose(a["probabilities"], b["probabilities"])  # the model never saw test labels
    assert a["metrics"]["accuracy"] > 0.8 and b["metrics"]["accuracy"] < 0.2
    rows = prediction_rows(a, list(corpus.splits["test"]["n_tokens"]))
    assert [r.predicted for r in rows] == a["probabilities"].argmax(1).tolist()
    assert sum(r.right for r in rows) / len(rows) == a["metrics"]["accuracy"]


def test_multi_label_baseline_predicts_each_label():
    train, validation, test = _split(60, 0), _split(20, 1), _split(20, 2)

    def multi(split):
        return split.map(lambda r: {"labels": [r["labels"], 1 - r["labels"], 1]})  # the third label is always on

    corpus = Corpus({"train": multi(train), "validation": multi(validation), "test": multi(test)},
                    ["pos", "neg", "always"], True, {})
    result = tfidf_baseline(corpus)
    assert result["probabilities"].shape == (20, 3)
    assert result["metrics"]["exact_match"] > 0.8
    rows = prediction_rows(result, [14] * 20)
    assert all(len(r.predicted) == 3 and r.predicted[2] == 1 for r in rows)
