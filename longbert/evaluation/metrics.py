"""The numbers of a held-out split: accuracy and macro-F1 (single-label) or exact match, micro-/macro-F1 and Hamming
loss (multi-label, at per-label decision thresholds that `tune_thresholds` can pick on validation), per-class
precision/recall, the confusion matrix and its largest cells, and the headline metric by document length."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import confusion_matrix, f1_score, precision_recall_fscore_support

from longbert.data.lengths import LENGTH_BUCKETS, length_bucket
from longbert.evaluation.reliability import calibration_section

# The numbers a validation entry of the training history keeps.
HISTORY_METRICS = ("accuracy", "exact_match", "micro_f1", "macro_f1", "hamming_loss", "loss")
MANY_CLASSES = 6  # above this many classes a Markdown matrix is unreadable: top confusions and a plot instead
TOP_CONFUSIONS = 10


def compute_metrics(labels: np.ndarray, probabilities: np.ndarray, n_tokens: list[int], label_names: list[str],
                    multi_label: bool, thresholds: list[float] | None = None,
                    uncalibrated: np.ndarray | None = None) -> dict:
    """labels (D,) ints or (D, C) multi-hot; probabilities (D, C) -> metrics dict (plain JSON types).
    Single-label: accuracy, macro_f1. Multi-label (a label is predicted when its probability reaches its threshold,
    0.5 unless `thresholds` (C,) says otherwise): exact_match (every label right), micro_f1, macro_f1, hamming_loss.
    by_length holds the headline metric (accuracy, or exact_match) per length bucket; calibration, how far the
    probabilities can be trusted (`calibration_section`; with `uncalibrated`, the probabilities before a calibrated
    model's calibration, the same numbers for them)."""
    classes = list(range(len(label_names)))
    truth = labels.astype(int)
    if multi_label:
        truth = truth.reshape(probabilities.shape)  # (D, C), also for one label given as (D,)
        predicted = multi_label_predictions(probabilities, thresholds)
        correct = (predicted == truth).all(1)
        eps = 1e-7
        loss = float(-np.mean(truth * np.log(probabilities + eps) + (1 - truth) * np.log(1 - probabilities + eps)))
        counts = _label_counts(truth, predicted)
        matrix = counts["matrix"]
        precision, recall, f1, support = counts["precision"], counts["recall"], counts["f1"], counts["support"]
    else:
        predicted = probabilities.argmax(1)
        correct = predicted == truth
        loss = float(-np.mean(np.log(probabilities[np.arange(len(truth)), truth] + 1e-7)))
        matrix = confusion_matrix(truth, predicted, labels=classes).tolist()
        precision, recall, f1, support = precision_recall_fscore_support(
            truth, predicted, labels=classes, zero_division=0
        )
    headline = "exact_match" if multi_label else "accuracy"
    by_length = {}
    buckets = np.array([length_bucket(n) for n in n_tokens])
    for _, _, name in LENGTH_BUCKETS:
        in_bucket = buckets == name
        by_length[name] = {
            "documents": int(in_bucket.sum()),
            headline: float(correct[in_bucket].mean()) if in_bucket.any() else None,
        }
    metrics = {"documents": int(len(truth)), headline: float(correct.mean())}
    if multi_label:
        metrics["micro_f1"] = counts["micro_f1"]
        metrics["macro_f1"] = float(np.mean(f1))
        metrics["hamming_loss"] = float((predicted != truth).mean())
        metrics["thresholds"] = [float(t) for t in (thresholds or [0.5] * len(classes))]
    else:
        metrics["macro_f1"] = float(f1_score(truth, predicted, labels=classes, average="macro", zero_division=0))
    metrics.update({
        "loss": loss,
        "per_class": {
            name: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for name, p, r, f, s in zip(label_names, precision, recall, f1, support)
        },
        "confusion_matrix": matrix,
        "by_length": by_length,
        "calibration": calibration_section(probabilities, truth, n_tokens, multi_label, uncalibrated, label_names),
    })
    return metrics


def _label_counts(truth: np.ndarray, predicted: np.ndarray) -> dict:
    """truth, predicted (D, C) 0/1 -> each label's precision, recall, F1 and support (C,), its 2x2 matrix
    [[tn, fp], [fn, tp]] and micro-F1, as sklearn's multi-label averages define them (0 where a ratio has nothing
    to count). Counted here rather than by sklearn, which reads a (D, 1) indicator as a binary problem: one label
    would be scored over both its presence and its absence."""
    tp = (truth & predicted).sum(0)
    fp = ((1 - truth) & predicted).sum(0)
    fn = (truth & (1 - predicted)).sum(0)
    tn = len(truth) - tp - fp - fn
    ratio = lambda top, bottom: np.divide(top, bottom, out=np.zeros(len(top)), where=bottom > 0)
    all_tp, all_wrong = int(tp.sum()), int(fp.sum() + fn.sum())
    return {"precision": ratio(tp, tp + fp), "recall": ratio(tp, tp + fn), "f1": ratio(2 * tp, 2 * tp + fp + fn),
            "support": tp + fn, "micro_f1": 2 * all_tp / (2 * all_tp + all_wrong) if all_tp + all_wrong else 0.0,
            "matrix": np.stack([np.stack([tn, fp], -1), np.stack([fn, tp], -1)], 1).tolist()}


def multi_label_predictions(probabilities: np.ndarray, thresholds: list[float] | None = None) -> np.ndarray:
    """probabilities (D, C) -> (D, C) 0/1: a label is predicted when its probability reaches its threshold (0.5)."""
    limits = np.asarray(thresholds if thresholds is not None else [0.5] * probabilities.shape[1])
    return (probabilities >= limits[None, :]).astype(int)


def tune_thresholds(labels: np.ndarray, probabilities: np.ndarray, per_label: bool) -> list[float]:
    """The multi-label decision thresholds (C,) that maximise F1 on these (validation) predictions: one threshold for
    every label that maximises micro-F1, or (`per_label`) each label's own that maximises its F1. Each threshold, with
    `>=`, predicts exactly the documents of the best split; a label with no positives keeps 0.5. A threshold is in
    [0, 1]: 0 where the best split admits documents at probability 0, 1 where it admits only those at 1."""
    truth = labels.astype(int).reshape(probabilities.shape)
    if per_label:
        return [_best_threshold(truth[:, c], probabilities[:, c]) for c in range(truth.shape[1])]
    return [_best_threshold(truth.ravel(), probabilities.ravel())] * truth.shape[1]


def _best_threshold(truth: np.ndarray, probabilities: np.ndarray) -> float:
    """truth, probabilities (n,) -> the threshold with the best F1 (the highest such one on a tie).

    Several places compare a probability with a threshold: numpy in float64, the model's rows as Python floats,
    torch in the probabilities' own dtype (float32), which rounds a float64 threshold first. A threshold that is a
    value of that dtype compares the same in all of them, so the threshold is the midpoint between the lowest
    admitted probability and the highest refused one rounded to that dtype, or, where no value of the dtype lies
    strictly between the two (adjacent float32 values, or a midpoint that rounds onto one end), the lowest admitted
    probability itself. No clipping: a split near 0 or 1 is kept as it is."""
    positives = int(truth.sum())
    if positives == 0:
        return 0.5
    dtype = probabilities.dtype if np.issubdtype(probabilities.dtype, np.floating) else np.dtype(np.float64)
    probabilities = probabilities.astype(dtype, copy=False)
    order = np.argsort(-probabilities, kind="stable")
    p, t = probabilities[order], truth[order]
    true_positives = np.cumsum(t)  # predicting the first k+1 documents positive
    predicted = np.arange(1, len(p) + 1)
    f1 = 2 * true_positives / (predicted + positives)
    ends = np.r_[p[1:] != p[:-1], True]  # a threshold cannot split tied probabilities
    k = int(np.flatnonzero(ends)[np.argmax(f1[ends])])
    lowest = p[k]
    below = p[k + 1] if k + 1 < len(p) else dtype.type(0)  # admitting every document: anything in (0, lowest]
    middle = dtype.type((float(lowest) + float(below)) / 2)
    return float(middle if below < middle <= lowest else lowest)


def improves(value: float, best: float | None, metric: str) -> bool:
    """Whether a validation `metric` value beats the best so far (lower is better for loss, higher otherwise)."""
    return best is None or (value < best if metric == "loss" else value > best)


def top_confusions(matrix: list[list[int]], label_names: list[str], k: int = TOP_CONFUSIONS) -> list[dict]:
    """The k largest off-diagonal cells of a (C, C) confusion matrix (rows true, columns predicted), largest first:
    [{'true', 'predicted', 'count', 'share'}], share being the count over the true class's documents."""
    cells = [(count, t, p) for t, row in enumerate(matrix) for p, count in enumerate(row) if t != p and count > 0]
    cells.sort(key=lambda cell: (-cell[0], cell[1], cell[2]))
    return [{"true": label_names[t], "predicted": label_names[p], "count": int(count),
             "share": count / (sum(matrix[t]) or 1)} for count, t, p in cells[:k]]


def headline(metrics: dict) -> str:
    """One line of a split's main numbers: accuracy and macro-F1, or for multi-label exact match, micro- and
    macro-F1."""
    if "exact_match" in metrics:
        return (f"exact match {metrics['exact_match']:.4f}, micro-F1 {metrics['micro_f1']:.4f}, "
                f"macro-F1 {metrics['macro_f1']:.4f} ({_documents(metrics['documents'])})")
    return (f"accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f} "
            f"({_documents(metrics['documents'])})")


def _documents(n: int) -> str:
    return f"{n} document{'' if n == 1 else 's'}"
