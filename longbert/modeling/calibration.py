"""Calibration, fitted and applied: temperature scaling (Guo et al. 2017, "On Calibration of Modern Neural
Networks"). One temperature T divides the logits, softmax(z / T); for multi-label, one T per label divides each
label's sigmoid logit. T > 1 softens over-confident probabilities; the predicted class never changes.

    calibration = fit_calibration(validation_probabilities, validation_labels, multi_label=False)
    calibration.apply(test_probabilities)            # saved probabilities, as the calibrated model answers them
    answered_probabilities(model.settings, logits)   # a model's logits -> the probabilities it answers

The fit is chosen over no correction only when it lowers the negative log-likelihood of validation documents it was
not fitted on (k-fold), so a model that is already calibrated is left as it is. It works on the probabilities
prediction files hold: the log of a softmax is the logits up to a constant, which softmax ignores. Whatever the
input, logits or saved probabilities, the temperature is applied in one place (`divided`); how far probabilities
can be trusted is measured in longbert.evaluation.reliability.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch
from scipy.optimize import minimize_scalar

from longbert.config import is_multi_label

FOLDS = 5  # validation split k ways to choose between no correction and a temperature
# auto fits a temperature from this many validation documents: on fewer, one fitted temperature can follow their noise
# (a MiniLM run with 48 validation reviews got T = 0.25, which doubled its test ECE); `temperature` forces one anyway
AUTO_DOCUMENTS = 100
SMALLEST = 1e-7  # probabilities below this (prediction files round to 6 digits) are read as this
METHODS = ("none", "temperature")
# The natural logarithm of the smallest and largest temperature the fit considers (T between 0.05 and 20), and so the
# range a model's settings may hold: a temperature of 1e8 read from a tampered file would make every probability 0.5.
LOG_TEMPERATURE_BOUNDS = (-3.0, 3.0)


@dataclass(frozen=True)
class Calibration:
    """A fitted correction: `temperatures` holds one T (single-label) or one per label (multi-label); `method` none
    means every T is 1."""

    method: str
    temperatures: list[float]
    multi_label: bool
    documents: int  # validation documents it was fitted on
    # With method none: why no temperature is kept; with a forced temperature: why it may not hold
    # (`forced_fit_caveat`); a sentence a person reads
    reason: str = ""

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
                   int(data["documents"]), str(data.get("reason", "")))


def divided(logits: torch.Tensor, temperatures) -> torch.Tensor:
    """(N, C) logits divided by the temperature (one) or the temperatures (one per label): the one place a
    temperature is applied."""
    return logits / logits.new_tensor(temperatures)


def answered(logits: torch.Tensor, temperatures, multi_label: bool) -> torch.Tensor:
    """(N, C) logits -> (N, C) probabilities: softmax (single-label) or one sigmoid per label of the logits divided
    by `temperatures` (None: as they are)."""
    if temperatures is not None:
        logits = divided(logits, temperatures)
    return torch.sigmoid(logits) if multi_label else logits.softmax(-1)


def calibrated_logits(settings, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
    """(B, C) logits -> (B, C) float32, divided by the model settings' calibration temperatures when it has them
    (and `calibrated`): what softmax or sigmoid makes the answered probabilities of (the transformers wrapper's
    logits)."""
    logits = logits.float()
    return divided(logits, settings.temperatures) if calibrated and settings.temperatures is not None else logits


def answered_probabilities(settings, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
    """(B, C) logits -> the (B, C) probabilities a model with these settings (ModelSettings) answers: softmax
    (single-label) or one sigmoid per label, of the logits divided by its calibration temperatures when it has them
    (and `calibrated`). The one place where logits become probabilities, for every way of running a model."""
    return answered(calibrated_logits(settings, logits, calibrated), None, is_multi_label(settings.problem_type))


def logits_of(probabilities: np.ndarray, multi_label: bool) -> np.ndarray:
    """Logits up to a per-row constant (single-label: log p) or exactly (multi-label: log p - log(1 - p))."""
    p = np.clip(np.asarray(probabilities, dtype=np.float64), SMALLEST, 1 - SMALLEST if multi_label else 1.0)
    return np.log(p) - np.log1p(-p) if multi_label else np.log(p)


def scaled(probabilities: np.ndarray, temperatures, multi_label: bool) -> np.ndarray:
    """(N, C) saved probabilities -> the same with their logits divided by `temperatures` (`answered`, in float64)."""
    logits = torch.from_numpy(logits_of(probabilities, multi_label))
    return answered(logits, np.atleast_1d(np.asarray(temperatures, dtype=np.float64)).tolist(), multi_label).numpy()


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


def forced_fit_caveat(temperatures: list[float], documents: int) -> str:
    """Why a temperature that model.calibration: temperature forced may not carry over to new documents, in a
    sentence; empty when nothing speaks against it. Said when it was fitted on fewer than AUTO_DOCUMENTS documents,
    or when the fit stopped at the edge of its search (one document the model already gets right pushes T to 20)."""
    edges = [t for t in temperatures if min(abs(np.log(t) - bound) for bound in LOG_TEMPERATURE_BOUNDS) < 0.01]
    said = []
    if documents < AUTO_DOCUMENTS:
        said.append(f"fitted on {documents} validation document{'' if documents == 1 else 's'}, fewer than the "
                    f"{AUTO_DOCUMENTS} model.calibration auto asks for")
    if edges:
        said.append(f"the fit stopped at the edge of its search (T = {edges[0]:.3f}; it considers "
                    f"{np.exp(LOG_TEMPERATURE_BOUNDS[0]):.2f} to {np.exp(LOG_TEMPERATURE_BOUNDS[1]):.2f})")
    return "; ".join(said) + ", so the temperature may not hold on new documents" if said else ""


def fit_calibration(probabilities: np.ndarray, labels: np.ndarray, multi_label: bool, folds: int = FOLDS,
                    seed: int = 0, choice: str = "auto") -> Calibration:
    """Temperature scaling fitted on these (validation) documents. `choice` auto (a recipe's model.calibration):
    kept only if it lowers the NLL of documents it was not fitted on (`folds`-fold; with fewer than AUTO_DOCUMENTS
    documents, no correction); temperature: always; none: no correction."""
    probabilities, labels = np.asarray(probabilities, dtype=np.float64), np.asarray(labels)
    n = len(labels)
    if choice == "temperature" and n > 0:
        temperatures = fit_temperature(probabilities, labels, multi_label)
        return Calibration("temperature", temperatures, multi_label, n, forced_fit_caveat(temperatures, n))
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


def calibrated_raw(calibration: Calibration, raw: dict) -> dict:
    """A split's raw predictions (`predict_dataset`'s dict) as the calibrated model answers them: `probabilities`
    calibrated, the ones before under `uncalibrated` (a calibration of method none leaves `raw` as it is)."""
    if calibration.method == "none":
        return raw
    before = raw.get("uncalibrated", raw["probabilities"])
    return {**raw, "probabilities": calibration.apply(before).astype(np.float32), "uncalibrated": before}
