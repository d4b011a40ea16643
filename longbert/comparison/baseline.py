"""The classical baseline every comparison shows: TF-IDF over words and bigrams + logistic regression
(scikit-learn), trained on the same training documents as the strategies, in seconds.

Practitioners run it first, and it is often hard to beat: on all of IMDb it scores about 91%. A strategy that does not
beat it has not earned its cost, and the comparison report says so.

Each comparison's baseline is trained once and kept beside its runs (tfidf-baseline.json, `baseline_row`), reused
while the data settings, seed and baseline settings are the same.

Settings: sublinear term frequencies, words and bigrams seen in at least 2 training documents, logistic regression
(one-vs-rest for multi-label) with its inverse regularisation strength C picked from `C_GRID` on the validation split,
never on test. The test split is predicted once, with the chosen C.

    python benchmarks/scripts/tfidf_baseline.py recipes/imdb_rating.yaml
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier

from longbert.comparison.formatting import say
from longbert.evaluation.metrics import compute_metrics
from longbert.evaluation.predictions import PredictionRow
from longbert.modeling.lexical import C_GRID  # the same grid as a hybrid model's TF-IDF half
from longbert.utils.atomic import write_json
from longbert.utils.folders import BASELINE_FILE

BASELINE = "tfidf"  # its name in comparison reports, beside the strategies' names
SETTINGS = {"features": "TF-IDF words+bigrams (min_df=2, sublinear tf)", "classifier": "logistic regression",
            "C_grid": list(C_GRID)}


def tfidf_baseline(corpus) -> dict:
    """Train on corpus.splits['train'], pick C on 'validation', predict 'test' (a `data.Corpus`). Returns
    {'settings', 'validation' ({C: headline metric}), 'metrics' (test, as `evaluation.metrics.compute_metrics` gives
    them), 'probabilities' (D, C) and 'labels' of the test split, 'train_seconds'}."""
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


def baseline_row(recipe, folder: Path, splits) -> dict:
    """The TF-IDF baseline on the recipe's data (`tfidf_baseline`), kept in <folder>/tfidf-baseline.json and reused
    while the data settings, seed and baseline settings are the same. `splits()` gives the Corpus."""
    key = {"data": dataclasses.asdict(recipe.data), "seed": recipe.seed, "backbone": recipe.backbone.name,
           "problem_type": recipe.model.problem_type, "settings": SETTINGS}
    path = folder / BASELINE_FILE
    try:
        saved = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        saved = None
    if saved is not None and saved.get("key") == json.loads(json.dumps(key)):
        result = saved["result"]
        return {**result, "probabilities": np.asarray(result["probabilities"]), "labels": np.asarray(result["labels"])}
    say("training the TF-IDF + logistic regression baseline")
    result = tfidf_baseline(splits())
    say(f"baseline: test {100 * result['metrics'].get('accuracy', result['metrics'].get('exact_match', 0)):.1f}% "
        f"(C={result['settings']['C']} chosen on validation) in {result['train_seconds']:.0f}s")
    folder.mkdir(parents=True, exist_ok=True)
    write_json(path, {"key": key, "result": {**result, "probabilities": result["probabilities"].tolist(),
                                             "labels": result["labels"].tolist()}})
    return result
