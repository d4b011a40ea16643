"""How far a model's probabilities can be trusted, and the one correction fitted on validation that makes them fit.

    calibration = fit_calibration(validation_probabilities, validation_labels, multi_label=False)
    calibration.apply(test_probabilities)          # same argmax, probabilities that match how often it is right
    calibration_metrics(probabilities, labels)     # ECE, NLL, Brier score and the reliability diagram's bins
    coverage_curve(probabilities, labels)          # accuracy when only the surest share of documents is answered

Temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural Networks"): one temperature T divides the
logits, softmax(z / T); for multi-label, one T per label divides each label's sigmoid logit. T > 1 softens
over-confident probabilities; the predicted class never changes. It is chosen over no correction only when it lowers
the negative log-likelihood of validation documents it was not fitted on (k-fold), so a model that is already
calibrated is left as it is. Everything here is numpy on probabilities: the log of a softmax is the logits up to a
constant, which softmax ignores, so the files' probabilities are enough.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from longbert.data.lengths import LENGTH_BUCKETS, length_bucket
from longbert.modeling.settings import LOG_TEMPERATURE_BOUNDS

ECE_BINS = 15  # equal-width confidence bins, as Guo et al.
FOLDS = 5  # validation split k ways to choose between no correction and a temperature
# auto fits a temperature from this many validation documents: on fewer, one fitted temperature can follow their noise
# (a MiniLM run with 48 validation reviews got T = 0.25, which doubled its test ECE); `temperature` forces one anyway
AUTO_DOCUMENTS = 100
SMALLEST = 1e-7  # probabilities below this (prediction files round to 6 digits) are read as this
METHODS = ("none", "temperature")


@dataclass(frozen=True)
class Calibration:
    """A fitted correction: `temperatures` holds one T (single-label) or one per label (multi-label); `method` none
    means every T is 1."""

    method: str
    temperatures: list[float]
    multi_label: bool
    documents: int  # validation documents it was fitted on
    reason: str = ""  # with method none: why no temperature is kept, in a sentence a person reads

    def apply(self, probabilities: np.ndarray) -> np.ndarray:
        """(N, C) probabilities -> calibrated (N, C) probabilities, the same argmax (single-label) or the same side of
        0.5 (multi-label)."""
        probabilities = np.asarray(probabilities, dtype=np.float64)
        if self.method == "none":
            return probabilities
        return scaled(probabilities, np.asarray(self.temperatures), self.multi_label)

    @property
    def model_temperatures(self) -> list[float] | None:
        """What a model's settings hold of it (ModelSettings.temperatures): its temperatures, or None for no
        correction."""
        return None if self.method == "none" else list(self.temperatures)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        return cls(str(data["method"]), [float(t) for t in data["temperatures"]], bool(data["multi_label"]),
                   int(data["documents"]))


def logits_of(probabilities: np.ndarray, multi_label: bool) -> np.ndarray:
    """Logits up to a per-row constant (single-label: log p) or exactly (multi-label: log p - log(1 - p))."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), SMALLEST, 1 - SMALLEST if multi_label else 1.0)
    return np.log(p) - np.log1p(-p) if multi_label else np.log(p)


def scaled(probabilities: np.ndarray, temperatures: np.ndarray, multi_label: bool) -> np.ndarray:
    """`probabilities` with their logits divided by `temperatures` (a scalar for single-label, one per label)."""
    z = logits_of(probabilities, multi_label) / temperatures
    if multi_label:
        return 1.0 / (1.0 + np.exp(-z))
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def negative_log_likelihood(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool) -> float:
    """Mean NLL per document (multi-label: per document and label, as binary cross-entropy)."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), 1e-12, 1 - 1e-12)
    labels = np.asarray(labels)
    if multi_label:
        return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    return float(-np.mean(np.log(p[np.arange(len(labels)), labels])))


def fit_temperature(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool) -> list[float]:
    """The temperature(s) that minimise validation NLL: one for single-label, one per label for multi-label."""
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)

    def best(p: np.ndarray, y: np.ndarray, multi: bool) -> float:
        found = minimize_scalar(lambda log_t: negative_log_likelihood(scaled(p, np.exp(log_t), multi), y, multi),
                                bounds=LOG_TEMPERATURE_BOUNDS, method="bounded")
        return float(np.exp(found.x))

    if multi_label:
        return [best(probabilities[:, [j]], labels[:, [j]], True) for j in range(probabilities.shape[1])]
    return [best(probabilities, labels, False)]


def fit_calibration(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool, folds: int = FOLDS,
                    seed: int = 0, choice: str = "auto") -> Calibration:
    """Temperature scaling fitted on these (validation) documents. `choice` auto (a recipe's model.calibration):
    kept only if it lowers the NLL of documents it was not fitted on (`folds`-fold; with fewer than AUTO_DOCUMENTS
    documents, no correction); temperature: always; none: no correction."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    n = len(labels)
    if choice == "temperature" and n > 0:
        return Calibration("temperature", fit_temperature(probabilities, labels, multi_label), multi_label, n)
    if n < max(folds, AUTO_DOCUMENTS) or choice == "none":
        reason = ("model.calibration is none" if choice == "none" else
                  f"validation holds {n} document{'' if n == 1 else 's'}, and model.calibration auto fits a "
                  f"temperature only from {max(folds, AUTO_DOCUMENTS)}, since one fitted on fewer follows their "
                  "noise; give validation more documents, or set model.calibration: temperature to fit one anyway")
        return Calibration("none", [1.0] * (probabilities.shape[1] if multi_label else 1), multi_label, n, reason)
    order = np.random.default_rng(seed).permutation(n)
    held_out = {method: 0.0 for method in METHODS}
    for fold in np.array_split(order, folds):
        rest = np.setdiff1d(order, fold)
        temperatures = np.asarray(fit_temperature(probabilities[rest], labels[rest], multi_label))
        held_out["none"] += negative_log_likelihood(probabilities[fold], labels[fold], multi_label) * len(fold)
        held_out["temperature"] += negative_log_likelihood(
            scaled(probabilities[fold], temperatures, multi_label), labels[fold], multi_label) * len(fold)
    temperatures = fit_temperature(probabilities, labels, multi_label)
    if held_out["temperature"] < held_out["none"]:
        return Calibration("temperature", temperatures, multi_label, n)
    return Calibration("none", [1.0] * len(temperatures), multi_label, n,
                       f"a temperature fitted on validation did not lower the log-loss of the validation documents "
                       f"it was not fitted on ({folds}-fold), so the probabilities are kept as the network gives them")


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


def calibrated_raw(calibration: Calibration, raw: dict) -> dict:
    """A split's raw predictions (`predict_dataset`'s dict) as the calibrated model answers them: `probabilities`
    calibrated, the ones before under `uncalibrated` (a calibration of method none leaves `raw` as it is)."""
    if calibration.method == "none":
        return raw
    before = raw.get("uncalibrated", raw["probabilities"])
    return {**raw, "probabilities": calibration.apply(before).astype(np.float32), "uncalibrated": before}


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
