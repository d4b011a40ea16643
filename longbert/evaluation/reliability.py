"""How far a model's probabilities can be trusted: ECE, NLL, Brier score and the reliability diagram's bins of a
split's predictions, by length bucket and by label, and the coverage curve (accuracy when only the surest share of
documents is answered), for metrics.json, metrics.md and compare's report. The correction fitted on validation is
longbert.modeling.calibration's.

    calibration_metrics(probabilities, labels)     # ECE, NLL, Brier score and the reliability diagram's bins
    coverage_curve(probabilities, labels)          # accuracy when only the surest share of documents is answered
"""

from __future__ import annotations

import numpy as np

from longbert.data.lengths import LENGTH_BUCKETS, length_bucket
from longbert.modeling.calibration import negative_log_likelihood

ECE_BINS = 15  # equal-width confidence bins, as Guo et al.


def _confidence_and_correct(probabilities: np.ndarray, labels: np.ndarray,
                            multi_label: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per decision: how sure the model was of what it said, and whether it was right. Single-label: one decision
    per document (its top class); multi-label: one per document and label (p >= 0.5 or not)."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    if multi_label:
        p = probabilities.ravel()
        return np.maximum(p, 1 - p), ((p >= 0.5) == labels.ravel().astype(bool))
    return probabilities.max(axis=1), probabilities.argmax(axis=1) == labels


def reliability_bins(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool = False,
                     bins: int = ECE_BINS) -> list[dict]:
    """The reliability diagram's data: per equal-width confidence bin that holds documents, its edges, count, mean
    confidence and accuracy."""
    confidence, correct = _confidence_and_correct(probabilities, labels, multi_label)
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bins hold (from, to]; rounding first keeps a confidence on an edge (0.7 * 10 = 7.000000000000001) in its bin.
    where = np.clip(np.ceil(np.round(confidence * bins, 9)).astype(int) - 1, 0, bins - 1)
    out = []
    for b in range(bins):
        held = where == b
        if held.any():
            out.append({"from": round(float(edges[b]), 4), "to": round(float(edges[b + 1]), 4),
                        "count": int(held.sum()), "confidence": float(confidence[held].mean()),
                        "accuracy": float(correct[held].mean())})
    return out


def calibration_metrics(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool = False,
                        bins: int = ECE_BINS) -> dict:
    """ECE (`bins` equal-width bins, weighted by count), NLL, Brier score, mean confidence and the reliability bins."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    table = reliability_bins(probabilities, labels, multi_label, bins)
    total = sum(b["count"] for b in table)
    ece = sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in table) / total
    truth = labels if multi_label else np.eye(probabilities.shape[1])[labels]
    brier = np.mean((probabilities - truth) ** 2) if multi_label else np.mean(((probabilities - truth) ** 2).sum(1))
    confidence, _ = _confidence_and_correct(probabilities, labels, multi_label)
    return {"ece": float(ece), "nll": negative_log_likelihood(probabilities, labels, multi_label),
            "brier": float(brier), "mean_confidence": float(confidence.mean()), "bins": table}


def calibration_section(probabilities: np.ndarray, labels: np.ndarray, n_tokens: list[int], multi_label: bool,
                        uncalibrated: np.ndarray | None = None, label_names: list[str] | None = None) -> dict:
    """What a split's metrics say of its probabilities: ECE, NLL, Brier score, mean confidence and the reliability
    bins of what the model answered, the same by length bucket (without bins) and, for multi-label, by label
    (`per_label`, keyed by `label_names`), the coverage curve, and, for a calibrated model, `uncalibrated`: the same
    numbers before its calibration."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    buckets = np.array([length_bucket(n) for n in n_tokens])
    headline = lambda m: {k: m[k] for k in ("ece", "nll", "brier", "mean_confidence")}

    def measured(p: np.ndarray) -> dict:
        by_length = {name: {"documents": int((buckets == name).sum()),
                            **(headline(calibration_metrics(p[buckets == name], labels[buckets == name], multi_label))
                               if (buckets == name).any() else {})}
                     for _, _, name in LENGTH_BUCKETS}
        out = {**calibration_metrics(p, labels, multi_label), "by_length": by_length}
        if multi_label:
            names = label_names or [str(j) for j in range(p.shape[1])]
            out["per_label"] = {name: headline(calibration_metrics(p[:, [j]], labels[:, [j]], True))
                                for j, name in enumerate(names)}
        return out

    section = {**measured(probabilities), "coverage": coverage_curve(probabilities, labels, multi_label)}
    if uncalibrated is not None:
        section["uncalibrated"] = measured(np.asarray(uncalibrated, dtype=np.float64))
    return section


def document_confidence(probabilities: np.ndarray, labels: np.ndarray,
                        multi_label: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(D,) how sure the model was of each document's answer, and (D,) whether it was right: its top class's
    probability; multi-label: its least sure label's, and right when every label is (at 0.5)."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    if multi_label:
        confidence = np.maximum(probabilities, 1 - probabilities).min(axis=1)
        return confidence, ((probabilities >= 0.5) == labels.astype(bool)).all(axis=1)
    return probabilities.max(axis=1), probabilities.argmax(axis=1) == labels


def coverage_curve(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool = False,
                   steps: int = 20) -> list[dict]:
    """Accuracy when only the surest documents are answered: for coverage 5%, 10%, ... 100% (`steps` points), the
    confidence threshold that answers that share and the accuracy on it. Multi-label: per document, its least sure
    label decides, and a document is right when every label is."""
    confidence, correct = document_confidence(probabilities, labels, multi_label)
    order = np.argsort(-confidence, kind="stable")
    out = []
    for k in range(1, steps + 1):
        answered = max(1, int(round(len(order) * k / steps)))
        kept = order[:answered]
        out.append({"coverage": answered / len(order), "threshold": float(confidence[kept].min()),
                    "accuracy": float(correct[kept].mean()), "answered": answered})
    return out


def threshold_for_accuracy(curve: list[dict], target: float) -> dict | None:
    """The point of `coverage_curve` that answers the most documents at `target` accuracy or better; None if none
    does."""
    reaching = [point for point in curve if point["accuracy"] >= target]
    return max(reaching, key=lambda point: point["coverage"]) if reaching else None
