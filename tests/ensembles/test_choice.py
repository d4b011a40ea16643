"""An ensemble's members: the group of runs is chosen on validation predictions (never the test split), ties go to
the smaller group, forward selection past the exhaustive limit, and the test rows average the members'
probabilities."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helpers import ENSEMBLE_LABELS, ensemble_validation, prediction_rows
from longbert.ensembles import choice
from longbert.ensembles.choice import average_calibration, averaged_rows, choose_members
from longbert.modeling.calibration import Calibration

rows = prediction_rows
LABELS = ENSEMBLE_LABELS
VALIDATION = ensemble_validation()


def test_the_best_group_on_validation_is_chosen():
    members, score, scored = choose_members(VALIDATION, "accuracy")
    assert members == ("a", "b") and score == 1.0 and scored == 4  # ab, ac, bc, abc


def test_a_tie_goes_to_the_smaller_group_then_to_the_earlier_one():
    same = {name: rows(LABELS, [[0.9, 0.1], [0.1, 0.9], [0.9, 0.1], [0.1, 0.9]]) for name in ("x", "y", "z")}
    assert choose_members(same, "macro_f1")[0] == ("x", "y")


def test_runs_of_one_strategy_alone_are_not_an_ensemble_group():
    """compare --seeds: one strategy's seeds averaged are that strategy's seed row, so the ensemble's groups mix
    strategies; a and b here are seeds of one strategy, so their pair (the best group above) is not a candidate."""
    members, _, scored = choose_members(VALIDATION, "accuracy", {"a": "chunk", "b": "chunk", "c": "truncate"})
    assert scored == 3 and "c" in members  # ac, bc, abc


def test_past_the_exhaustive_limit_forward_selection_grows_the_best_pair(monkeypatch):
    # P(positive) on six documents, labels 0 1 0 1 0 1. The best pair is d + f (right on five); e grows it to all
    # six, g would take it to three; from d + f + e, adding g gains nothing, so the selection stops.
    six = [0, 1, 0, 1, 0, 1]
    positive = {"d": [0.6, 0.8, 0.1, 0.8, 0.4, 0.2], "e": [0.6, 0.3, 0.8, 0.2, 0.1, 0.8],
                "f": [0.2, 0.9, 0.3, 0.8, 0.6, 0.7], "g": [0.8, 0.6, 0.8, 0.9, 0.6, 0.1]}
    validation = {name: rows(six, [[1 - q, q] for q in ps]) for name, ps in positive.items()}
    exhaustive = choose_members(validation, "accuracy")
    monkeypatch.setattr(choice, "EXHAUSTIVE_UP_TO", 3)
    members, score, scored = choose_members(validation, "accuracy")
    assert score == 1.0 and set(members) == {"d", "e", "f"} and score == exhaustive[1]
    assert scored == 6 + 2 + 1  # every pair, then d + f grown by e or g, then d + f + e by g (no gain: stop)
    assert exhaustive[2] == 11


def test_the_test_rows_average_the_members_probabilities():
    test = {"a": rows([0, 1], [[0.8, 0.2], [0.3, 0.7]]), "b": rows([0, 1], [[0.4, 0.6], [0.6, 0.4]])}
    out = averaged_rows(test, ("a", "b"), ["neg", "pos"])
    np.testing.assert_allclose([r.probabilities for r in out], [[0.6, 0.4], [0.45, 0.55]])
    assert [r.predicted for r in out] == [0, 1] and [r.n_tokens for r in out] == [100, 400]
    assert [r.predicted_label for r in out] == ["neg", "pos"] and all(r.uncalibrated is None for r in out)


def test_members_are_averaged_before_their_own_calibration_and_the_mean_is_calibrated_as_a_whole():
    """A calibrated member's row keeps what its logits gave (`uncalibrated`): that is what is averaged, as the
    ensemble folder's forward averages it; the ensemble's own calibration then applies to the mean, and the rows keep
    the mean as their `uncalibrated`."""
    a = [dataclasses.replace(r, probabilities=[0.5, 0.5], uncalibrated=u)
         for r, u in zip(rows([0, 1], [[0.8, 0.2], [0.3, 0.7]]), [[0.8, 0.2], [0.3, 0.7]])]
    b = rows([0, 1], [[0.4, 0.6], [0.6, 0.4]])
    calibration = Calibration("temperature", [2.0], False, 10)
    out = averaged_rows({"a": a, "b": b}, ("a", "b"), ["neg", "pos"], calibration)
    mean = np.array([[0.6, 0.4], [0.45, 0.55]])
    np.testing.assert_allclose([r.uncalibrated for r in out], mean)
    np.testing.assert_allclose([r.probabilities for r in out], calibration.apply(mean))
    assert [r.predicted for r in out] == [0, 1]  # a temperature never changes the class
    np.testing.assert_allclose([r.probabilities for r in out][0], [0.6 ** 0.5 / (0.6 ** 0.5 + 0.4 ** 0.5),
                                                                  0.4 ** 0.5 / (0.6 ** 0.5 + 0.4 ** 0.5)])


@pytest.mark.parametrize("choice, method", [("temperature", "temperature"), ("none", "none")])
def test_the_average_calibration_is_fitted_on_validation_as_the_recipe_says(choice, method):
    fitted = average_calibration(VALIDATION, ("a", "b"), choice)
    assert fitted.method == method and fitted.documents == 4
    assert average_calibration(None, ("a", "b")) is None  # a member kept no validation rows: nothing to fit on
