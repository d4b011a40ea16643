"""Calibration: temperature scaling recovers a known over-confidence, leaves a calibrated model alone, never changes a
prediction, and the measures (ECE, NLL, Brier, coverage) equal their hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from longbert.evaluation.reliability import (
    calibration_metrics,
    calibration_section,
    coverage_curve,
    reliability_bins,
    threshold_for_accuracy,
)
from longbert.modeling.calibration import Calibration, calibrated_raw, fit_calibration


def drawn(n: int, sharpen: float, seed: int = 0, classes: int = 2):
    """Documents whose true class probabilities are softmax(z), reported by a model as softmax(sharpen * z)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 2, size=(n, classes))
    true = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    labels = np.array([rng.choice(classes, p=p) for p in true])
    reported = np.exp(sharpen * z) / np.exp(sharpen * z).sum(1, keepdims=True)
    return reported, labels


def test_temperature_recovers_a_known_over_confidence_and_lowers_ece():
    reported, labels = drawn(4000, sharpen=2.5)
    calibration = fit_calibration(reported, labels, multi_label=False)
    assert calibration.method == "temperature"
    assert calibration.temperatures[0] == pytest.approx(2.5, rel=0.1)
    before, after = calibration_metrics(reported, labels), calibration_metrics(calibration.apply(reported), labels)
    assert after["ece"] < before["ece"] / 3 and after["nll"] < before["nll"]


def test_a_calibrated_model_is_left_about_as_it_is():
    reported, labels = drawn(4000, sharpen=1.0, seed=1)
    calibration = fit_calibration(reported, labels, multi_label=False)
    assert calibration.method == "none" or calibration.temperatures[0] == pytest.approx(1.0, abs=0.1)


def test_calibration_never_changes_a_prediction():
    reported, labels = drawn(500, sharpen=3.0, seed=2, classes=4)
    calibration = fit_calibration(reported, labels, multi_label=False)
    assert calibration.method == "temperature"
    np.testing.assert_array_equal(calibration.apply(reported).argmax(1), reported.argmax(1))
    np.testing.assert_allclose(calibration.apply(reported).sum(1), 1.0, atol=1e-12)


def test_too_few_documents_get_no_correction():
    reported, labels = drawn(3, sharpen=3.0)
    assert fit_calibration(reported, labels, multi_label=False).method == "none"


def test_multi_label_gets_one_temperature_per_label_and_keeps_each_side_of_one_half():
    rng = np.random.default_rng(3)
    z = rng.normal(0, 2, size=(3000, 2))
    labels = (rng.random((3000, 2)) < 1 / (1 + np.exp(-z))).astype(int)
    reported = 1 / (1 + np.exp(-z * np.array([3.0, 1.0])))  # label 0 over-confident, label 1 calibrated
    calibration = fit_calibration(reported, labels, multi_label=True)
    assert calibration.temperatures[0] == pytest.approx(3.0, rel=0.12)
    assert calibration.temperatures[1] == pytest.approx(1.0, rel=0.12)
    np.testing.assert_array_equal(calibration.apply(reported) >= 0.5, reported >= 0.5)


def test_a_calibration_reads_back_as_it_was_written():
    calibration = Calibration("temperature", [1.7], False, 200)
    assert Calibration.from_dict(calibration.to_dict()) == calibration


def test_ece_nll_and_brier_equal_their_hand_computed_values():
    probabilities = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.45, 0.55]])
    labels = np.array([0, 1, 1, 1])
    metrics = calibration_metrics(probabilities, labels, bins=10)
    # bins hold (from, to]: 0.9 (right), 0.8 (wrong), 0.7 (right) and 0.55 (right) each in its own bin
    expected_ece = (abs(1 - 0.9) + abs(0 - 0.8) + abs(1 - 0.7) + abs(1 - 0.55)) / 4
    assert metrics["ece"] == pytest.approx(expected_ece)
    assert metrics["nll"] == pytest.approx(-np.mean(np.log([0.9, 0.2, 0.7, 0.55])))
    brier = np.mean([0.1 ** 2 * 2, 0.8 ** 2 * 2, 0.3 ** 2 * 2, 0.45 ** 2 * 2])
    assert metrics["brier"] == pytest.approx(brier)
    assert [(b["from"], b["count"]) for b in metrics["bins"]] == [(0.5, 1), (0.6, 1), (0.7, 1), (0.8, 1)]


def test_reliability_bins_put_a_confidence_on_an_edge_in_the_bin_below():
    bins = reliability_bins(np.array([[0.8, 0.2], [0.2, 0.8]]), np.array([0, 0]), bins=10)
    assert bins == [{"from": 0.7, "to": 0.8, "count": 2, "confidence": pytest.approx(0.8), "accuracy": 0.5}]


def test_coverage_curve_answers_the_surest_documents_first():
    probabilities = np.array([[0.99, 0.01], [0.9, 0.1], [0.6, 0.4], [0.55, 0.45]])
    labels = np.array([0, 0, 1, 0])
    curve = coverage_curve(probabilities, labels, steps=4)
    assert [p["answered"] for p in curve] == [1, 2, 3, 4]
    assert [p["accuracy"] for p in curve] == pytest.approx([1.0, 1.0, 2 / 3, 0.75])
    assert curve[1]["threshold"] == pytest.approx(0.9)
    assert threshold_for_accuracy(curve, 0.95)["answered"] == 2
    assert threshold_for_accuracy(curve, 0.999)["answered"] == 2
    assert threshold_for_accuracy([{"accuracy": 0.5, "coverage": 1.0}], 0.9) is None


def test_the_recipe_choice_forces_or_refuses_a_temperature():
    calibrated_already, labels = drawn(600, sharpen=1.0, seed=4)
    assert fit_calibration(calibrated_already, labels, False, choice="temperature").method == "temperature"
    over_confident, labels = drawn(600, sharpen=3.0, seed=4)
    none = fit_calibration(over_confident, labels, False, choice="none")
    assert none.method == "none" and none.apply(over_confident) is not None
    np.testing.assert_array_equal(none.apply(over_confident), over_confident)


def test_a_split_section_measures_each_length_bucket_and_both_sides_of_a_calibration():
    reported, labels = drawn(300, sharpen=3.0, seed=5)
    lengths = [100] * 100 + [800] * 100 + [3000] * 100
    calibration = fit_calibration(reported, labels, False)
    raw = calibrated_raw(calibration, {"probabilities": reported, "labels": labels})
    np.testing.assert_array_equal(raw["uncalibrated"], reported)
    section = calibration_section(raw["probabilities"], labels, lengths, False, raw["uncalibrated"])
    assert section["ece"] == pytest.approx(calibration_metrics(raw["probabilities"], labels)["ece"])
    assert section["uncalibrated"]["ece"] == pytest.approx(calibration_metrics(reported, labels)["ece"])
    assert section["uncalibrated"]["nll"] > section["nll"]
    counted = {name: b["documents"] for name, b in section["by_length"].items() if b["documents"]}
    assert sum(counted.values()) == 300 and len(counted) == 3
    long = [b for b in section["by_length"].values() if b["documents"] and "ece" in b]
    assert all(0 <= b["ece"] <= 1 for b in long)
    empty = [b for b in section["by_length"].values() if not b["documents"]]
    assert all(set(b) == {"documents"} for b in empty)  # a bucket without documents has nothing to measure
    assert section["coverage"][-1]["coverage"] == 1.0
    assert calibrated_raw(Calibration("none", [1.0], False, 5), raw) is raw


def test_auto_fits_nothing_on_fewer_than_a_hundred_documents_and_temperature_still_does():
    """One temperature fitted on a few dozen documents follows their noise (a MiniLM run on 48 validation reviews got
    T = 0.25, and its test ECE doubled): auto leaves such a model as it is."""
    reported, labels = drawn(99, sharpen=3.0, seed=6)
    assert fit_calibration(reported, labels, False).method == "none"
    assert fit_calibration(reported, labels, False, choice="temperature").method == "temperature"
    reported, labels = drawn(100, sharpen=3.0, seed=6)
    assert fit_calibration(reported, labels, False).method == "temperature"


def test_a_forced_temperature_says_when_it_may_not_hold():
    """model.calibration: temperature on one validation document: the fit runs to an edge of its search, e^3 = 20.09
    where the model got it wrong (as sure as possible of nothing), e^-3 = 0.05 where right. It is kept, as asked,
    and says why it may not hold; a fit on enough documents that stops inside the search says nothing."""
    wrong = fit_calibration(np.array([[0.2, 0.8]]), np.array([0]), False, choice="temperature")
    assert wrong.method == "temperature" and wrong.temperatures[0] == pytest.approx(np.exp(3.0), rel=1e-3)
    assert wrong.reason.startswith("fitted on 1 validation document, fewer than the 100")
    assert "the fit stopped at the edge of its search (T = 20.08" in wrong.reason
    right = fit_calibration(np.array([[0.8, 0.2]]), np.array([0]), False, choice="temperature")
    assert right.temperatures[0] == pytest.approx(np.exp(-3.0), rel=1e-2) and "(T = 0.050;" in right.reason
    reported, labels = drawn(600, sharpen=3.0, seed=6)
    assert fit_calibration(reported, labels, False, choice="temperature").reason == ""
    reported, labels = drawn(40, sharpen=3.0, seed=6)
    few = fit_calibration(reported, labels, False, choice="temperature").reason
    assert few.startswith("fitted on 40 validation documents") and "edge" not in few
