"""The classical baseline every comparison shows: TF-IDF over words and bigrams + logistic regression
(scikit-learn), trained on the same training documents as the strategies, in seconds.

Practitioners run it first, and it is often hard to beat: on all of IMDb it scores about 91%. A strategy that does not
beat it has not earned its cost, and the comparison report says so.

Settings: sublinear term frequencies, words and bigrams seen in at least 2 training documents, logistic regression
(one-vs-rest for multi-label) with its inverse regularisation strength C picked from `C_GRID` on the validation split,
never on test. The test split is predicted once, with the chosen C.

    python benchmarks/scripts/tfidf_baseline.py recipes/imdb_rating.yaml
"""

from __future__ import annotations

import time

import numpy as np

from longbert.evaluation.predictions import PredictionRow
from longbert.modeling.lexical import C_GRID  # the same grid as a hybrid model's TF-IDF half

BASELINE = "tfidf"  # its name in comparison reports, beside the strategies' names
SETTINGS = {"features": "TF-IDF words+bigrams (min_df=2, sublinear tf)", "classifier": "logistic regression",
            "C_grid": list(C_GRID)}


def tfidf_baseline(corpus) -> dict:
    """Train on corpus.splits['train'], pick C on 'validation', predict 'test' (a `data.Corpus`). Returns
    {'settings', 'validation' ({C: headline metric}), 'metrics' (test, as `evaluation.metrics.compute_metrics` gives
    them), 'probabilities' (D, C) and 'labels' of the test split, 'train_seconds'}."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    from longbert.evaluation.metrics import compute_metrics

    started = time.perf_counter()
    train, validation, test = (corpus.splits[s] for s in ("train", "validation", "test"))
    names, multi_label = corpus.label_names, corpus.multi_label
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True)
    features = vectorizer.fit_transform(train["text"])
    labels = {split: np.asarray(d["labels"]) for split, d in (("train", train), ("validation", validation),
                                                               ("test", test))}

    def fit(c: float):
        model = LogisticRegression(C=c, max_iter=2000)
        return (OneVsRestClassifier(model) if multi_label else model).fit(features, labels["train"])

    def probabilities(model, split) -> np.ndarray:
        return model.predict_proba(vectorizer.transform(split["text"]))  # (D, C)

    headline = "exact_match" if multi_label else "accuracy"
    scores, models = {}, {}
    for c in C_GRID:
        models[c] = fit(c)
        scores[c] = compute_metrics(labels["validation"], probabilities(models[c], validation),
                                    list(validation["n_tokens"]), names, multi_label)[headline]
    best = max(C_GRID, key=lambda c: (scores[c], -c))  # ties go to the stronger regularisation
    test_probabilities = probabilities(models[best], test)
    seconds = time.perf_counter() - started
    metrics = compute_metrics(labels["test"], test_probabilities, list(test["n_tokens"]), names, multi_label)
    return {"settings": {**SETTINGS, "C": best}, "validation": {str(c): s for c, s in scores.items()},
            "metrics": metrics, "probabilities": test_probabilities, "labels": labels["test"],
            "train_seconds": seconds}


def prediction_rows(result: dict, n_tokens: list[int]) -> list[PredictionRow]:
    """The baseline's test predictions in the form of a run's predictions-test.jsonl rows (index, n_tokens, label,
    predicted, probabilities), so that the paired tests treat it like any strategy."""
    probabilities, labels = result["probabilities"], result["labels"]
    multi_label = labels.ndim == 2
    rows = []
    for i, (p, label) in enumerate(zip(probabilities, labels)):
        predicted = (p >= 0.5).astype(int).tolist() if multi_label else int(p.argmax())
        rows.append(PredictionRow(index=i, n_tokens=int(n_tokens[i]), label=label.tolist(), predicted=predicted,
                                  probabilities=[float(x) for x in p]))
    return rows
