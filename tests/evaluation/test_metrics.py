"""Metrics without training: multi-label thresholds tuned on synthetic probabilities, the multi-label metrics and
their names, the largest confusions, and class weights in the loss checked by hand."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

from helpers import build_model
from longbert.evaluation.evaluate import metrics_markdown
from longbert.evaluation.metrics import compute_metrics, top_confusions, tune_thresholds
from longbert.training.class_weights import class_weights_for


def f1(truth, predicted):
    tp = int((truth & predicted).sum())
    return 2 * tp / (truth.sum() + predicted.sum()) if truth.sum() + predicted.sum() else 0.0


def test_tuning_picks_the_threshold_that_maximises_validation_f1():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 2, (200, 3))
    # Label 0 is separable at 0.3, label 1 at 0.7; label 2 is noise.
    probabilities = np.stack([np.where(truth[:, 0], rng.uniform(0.3, 0.6, 200), rng.uniform(0.0, 0.29, 200)),
                              np.where(truth[:, 1], rng.uniform(0.71, 1.0, 200), rng.uniform(0.4, 0.7, 200)),
                              rng.uniform(0, 1, 200)], axis=1)
    per_label = tune_thresholds(truth, probabilities, per_label=True)
    grid = np.linspace(0.001, 0.999, 999)
    for c, threshold in enumerate(per_label):
        tuned = f1(truth[:, c], probabilities[:, c] >= threshold)
        assert tuned >= max(f1(truth[:, c], probabilities[:, c] >= t) for t in grid) - 1e-12, c
    assert f1(truth[:, 0], probabilities[:, 0] >= per_label[0]) == 1.0 and 0.29 < per_label[0] <= 0.3
    assert f1(truth[:, 1], probabilities[:, 1] >= per_label[1]) == 1.0 and 0.7 < per_label[1] <= 0.71
    # One global threshold maximises micro-F1 over every label.
    (shared,) = set(tune_thresholds(truth, probabilities, per_label=False))
    micro = lambda t: f1(truth.ravel(), probabilities.ravel() >= t)
    assert micro(shared) >= max(micro(t) for t in grid) - 1e-12
    assert micro(shared) > micro(0.5)


def _best_f1_by_brute_force(truth: np.ndarray, probabilities: np.ndarray) -> Fraction:
    """The best F1 over every split a threshold can make: each distinct probability as the lowest one admitted,
    and admitting none; exact fractions, so that no rounding decides between two splits."""
    positives = int(truth.sum())
    best = Fraction(0)
    for lowest in np.unique(probabilities):
        admitted = probabilities >= lowest
        best = max(best, Fraction(2 * int((truth & admitted).sum()), positives + int(admitted.sum())))
    return best


def _extreme_problems(dtype, count: int, seed: int = 0):
    """Small random problems whose probabilities come from a pool of the hard cases: exact 0 and 1, the float
    values next to them, sigmoid(20) and sigmoid(14.5) (1 and its neighbours in float32), 1.1e-7 and 4.1e-8 (below
    any clipping), adjacent values around 0.5, and ordinary random ones, with ties."""
    rng = np.random.default_rng(seed)
    one, zero, half = dtype(1), dtype(0), dtype(0.5)
    pool = [zero, one, np.nextafter(one, zero), np.nextafter(np.nextafter(one, zero), zero), np.nextafter(zero, one),
            dtype(1 / (1 + np.exp(-20.0))), dtype(1 / (1 + np.exp(-14.5))), dtype(1.1e-7), dtype(4.1e-8), half,
            np.nextafter(half, zero), np.nextafter(half, one), dtype(1e-6), dtype(1 - 1e-6)]
    for _ in range(count):
        n = int(rng.integers(1, 12))
        probabilities = np.where(rng.random(n) < 0.75, rng.choice(np.array(pool, dtype=dtype), n),
                                 rng.random(n).astype(dtype)).astype(dtype)
        yield rng.integers(0, 2, n), probabilities


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tuned_thresholds_realise_the_best_split_found_by_brute_force(dtype):
    from longbert.evaluation.metrics import multi_label_predictions

    problems = [(np.array([1, 0]), np.array([1 / (1 + np.exp(-20.0)), 1 / (1 + np.exp(-14.5))], dtype=dtype))]
    problems += list(_extreme_problems(dtype, 1500))
    for truth, probabilities in problems:
        (threshold,) = tune_thresholds(truth[:, None], probabilities[:, None], per_label=True)
        assert 0 <= threshold <= 1
        best = _best_f1_by_brute_force(truth, probabilities)
        # The three ways a threshold is applied: numpy (metrics), Python floats (predict's rows), torch in the
        # probabilities' own dtype; each must admit exactly the documents of the best split.
        as_numpy = multi_label_predictions(probabilities[:, None], [threshold])[:, 0]
        as_floats = np.array([float(q) >= threshold for q in probabilities])
        as_torch = (torch.from_numpy(probabilities) >= threshold).numpy()
        for admitted in (as_numpy, as_floats, as_torch):
            tp = int((truth & admitted).sum())
            tuned = Fraction(2 * tp, int(truth.sum()) + int(admitted.sum())) if truth.sum() else Fraction(0)
            assert tuned == best, (truth, probabilities, threshold)


def test_one_shared_threshold_realises_the_best_micro_f1_found_by_brute_force():
    rng = np.random.default_rng(1)
    for truth, probabilities in _extreme_problems(np.float32, 300, seed=2):
        hot = np.stack([truth, rng.integers(0, 2, len(truth))], 1)
        grid = np.stack([probabilities, rng.permutation(probabilities)], 1)
        (shared,) = set(tune_thresholds(hot, grid, per_label=False))
        admitted = grid >= shared
        tuned = Fraction(2 * int((hot & admitted).sum()), int(hot.sum()) + int(admitted.sum())) if hot.sum() else 0
        assert tuned == _best_f1_by_brute_force(hot.ravel(), grid.ravel())


def test_a_label_without_positives_keeps_the_default_threshold():
    truth = np.array([[1, 0], [0, 0], [1, 0]])
    probabilities = np.array([[0.9, 0.2], [0.1, 0.7], [0.8, 0.1]])
    assert tune_thresholds(truth, probabilities, per_label=True)[1] == 0.5


def test_multi_label_metrics_are_named_for_what_they_measure():
    truth = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 1]])
    probabilities = np.array([[0.9, 0.2, 0.4], [0.1, 0.6, 0.1], [0.7, 0.8, 0.3], [0.2, 0.1, 0.45]])
    names = ["a", "b", "c"]
    at_half = compute_metrics(truth, probabilities, [10] * 4, names, multi_label=True)
    assert "accuracy" not in at_half
    assert at_half["exact_match"] == 0.5  # rows 2 and 3; rows 1 and 4 miss label c
    assert at_half["hamming_loss"] == pytest.approx(2 / 12)
    assert at_half["micro_f1"] == pytest.approx(2 * 4 / (6 + 4))  # 4 true positives, 6 labels, 4 predicted
    assert at_half["macro_f1"] == pytest.approx(np.mean([1.0, 1.0, 0.0]))
    assert at_half["by_length"]["<=512"]["exact_match"] == 0.5
    tuned = compute_metrics(truth, probabilities, [10] * 4, names, multi_label=True, thresholds=[0.5, 0.5, 0.35])
    assert tuned["exact_match"] == 1.0 and tuned["hamming_loss"] == 0.0 and tuned["thresholds"] == [0.5, 0.5, 0.35]
    page = metrics_markdown(tuned, names, "t")
    assert "exact match (every label right): 1.0000" in page and "Hamming loss: 0.0000" in page
    assert "accuracy" not in page.lower().replace("exact match", "")
    assert "a 0.5000, b 0.5000, c 0.3500" in page


def _sklearn_multi_label(truth: np.ndarray, predicted: np.ndarray) -> dict:
    """sklearn's multi-label numbers of (D, C) indicators, C >= 2 (where sklearn reads them as multi-label)."""
    from sklearn.metrics import f1_score, multilabel_confusion_matrix, precision_recall_fscore_support

    precision, recall, f1_each, support = precision_recall_fscore_support(truth, predicted, zero_division=0)
    return {"micro_f1": f1_score(truth, predicted, average="micro", zero_division=0),
            "macro_f1": f1_score(truth, predicted, average="macro", zero_division=0),
            "per_class": [(p, r, f, s) for p, r, f, s in zip(precision, recall, f1_each, support)],
            "confusion_matrix": multilabel_confusion_matrix(truth, predicted).tolist()}


@pytest.mark.parametrize("seed", range(5))
def test_multi_label_metrics_match_sklearn_and_one_label_is_scored_as_multi_label(seed):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, (40, 3))
    truth[:, 2] = 0  # a label that never occurs: sklearn's zero_division=0 conventions
    probabilities = rng.random((40, 3))
    names = ["a", "b", "c"]
    ours = compute_metrics(truth, probabilities, [10] * 40, names, multi_label=True)
    reference = _sklearn_multi_label(truth, (probabilities >= 0.5).astype(int))
    assert ours["micro_f1"] == pytest.approx(reference["micro_f1"])
    assert ours["macro_f1"] == pytest.approx(reference["macro_f1"])
    assert ours["confusion_matrix"] == reference["confusion_matrix"]
    for name, (p, r, f, s) in zip(names, reference["per_class"]):
        assert ours["per_class"][name] == pytest.approx({"precision": p, "recall": r, "f1": f, "support": s})

    # One label alone is the same label's numbers of the two-label problem, not a binary problem over its
    # presence and absence (where micro-F1 would be accuracy and "support" would count the documents without it).
    alone = compute_metrics(truth[:, :1], probabilities[:, :1], [10] * 40, ["a"], multi_label=True)
    assert alone["per_class"]["a"] == pytest.approx(ours["per_class"]["a"])
    assert alone["per_class"]["a"]["support"] == int(truth[:, 0].sum())
    assert alone["micro_f1"] == pytest.approx(ours["per_class"]["a"]["f1"])
    assert alone["macro_f1"] == pytest.approx(ours["per_class"]["a"]["f1"])
    assert alone["confusion_matrix"] == ours["confusion_matrix"][:1]
    assert alone["hamming_loss"] == pytest.approx(1 - alone["exact_match"])


def test_single_label_metrics_keep_accuracy():
    metrics = compute_metrics(np.array([0, 1]), np.array([[0.8, 0.2], [0.6, 0.4]]), [10, 10], ["x", "y"], False)
    assert metrics["accuracy"] == 0.5 and "exact_match" not in metrics and "micro_f1" not in metrics


def test_top_confusions_are_the_largest_off_diagonal_cells_with_their_share_of_the_true_class():
    matrix = [[5, 3, 0], [1, 8, 1], [0, 4, 6]]
    assert top_confusions(matrix, ["a", "b", "c"], k=2) == [
        {"true": "c", "predicted": "b", "count": 4, "share": 0.4},
        {"true": "a", "predicted": "b", "count": 3, "share": 0.375},
    ]
    assert top_confusions([[4, 0], [0, 4]], ["a", "b"]) == []


def test_class_weights_enter_the_loss_as_computed_by_hand(tiny_backbone_dir):
    logits = torch.tensor([[2.0, -1.0], [0.5, 0.3], [-1.0, 1.5]])
    labels = torch.tensor([0, 1, 1])
    model = build_model(tiny_backbone_dir, "truncate")
    weights = torch.tensor([1.0, 3.0])
    log_p = logits.log_softmax(-1)[torch.arange(3), labels]
    by_hand = -(weights[labels] * log_p).sum() / weights[labels].sum()
    assert model.loss(logits, labels, weights).item() == pytest.approx(by_hand.item(), rel=1e-6)
    assert model.loss(logits, labels).item() == pytest.approx(-log_p.mean().item(), rel=1e-6)
    assert model.loss(logits, labels, weights).item() != pytest.approx(model.loss(logits, labels).item())

    multi = build_model(tiny_backbone_dir, "truncate", ["model.problem_type=multi_label"])
    hot = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    p = logits.sigmoid()
    by_hand = -(weights * hot * p.log() + (1 - hot) * (1 - p).log()).mean()  # pos_weight scales the positives
    assert multi.loss(logits, hot, weights).item() == pytest.approx(by_hand.item(), rel=1e-6)


def test_balanced_class_weights():
    from sklearn.utils.class_weight import compute_class_weight

    labels = [0, 0, 0, 1, 2, 2]
    ours = class_weights_for("balanced", labels, ["a", "b", "c"], multi_label=False)
    sklearn = compute_class_weight("balanced", classes=np.arange(3), y=np.array(labels))
    assert ours.tolist() == pytest.approx(sklearn.tolist())
    hot = [[1, 0], [1, 1], [0, 0], [1, 0]]  # label a: 3 positives, 1 negative; label b: 1 positive, 3 negatives
    assert class_weights_for("balanced", hot, ["a", "b"], multi_label=True).tolist() == pytest.approx([1 / 3, 3.0])
    assert class_weights_for([1, 2.5], labels, ["a", "b"], False).tolist() == [1.0, 2.5]
    assert class_weights_for(None, labels, ["a", "b", "c"], False) is None
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError,
                       match=r"model.class_weights has 2 weights but the data has 3 classes \(a, b, c\)"):
        class_weights_for([1, 2], labels, ["a", "b", "c"], False)
    # A class no training document has: refused, as scikit-learn refuses it, instead of given a made-up weight.
    with pytest.raises(LongbertError, match="model.class_weights balanced: no training document has the class c; "):
        class_weights_for("balanced", [0, 0, 1, 1], ["a", "b", "c"], False)
    with pytest.raises(LongbertError, match="no training document has the labels a, b; "):
        class_weights_for("balanced", [[0, 0, 1], [0, 0, 1]], ["a", "b", "c"], True)


def test_recipe_fields_are_validated_with_their_paths():
    from longbert.config import load_recipe
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError) as error:
        load_recipe(None, ["model.class_weights=heavy", "model.multi_label_threshold=1.5", "train.report_to=comet",
                           "train.log_every_steps=0", "train.early_stopping_patience=0",
                           "train.best_metric=exact_match"])
    message = str(error.value)
    for part in ("model.class_weights must be", "model.multi_label_threshold must be", "train.report_to must be one of",
                 "train.log_every_steps must be >= 1", "train.early_stopping_patience must be >= 1",
                 "train.best_metric exact_match is not measured for model.problem_type single_label"):
        assert part in message, part
    recipe = load_recipe(None, ["model.problem_type=multi_label", "model.class_weights=[1, 2]",
                                "model.multi_label_threshold=tune_per_label", "train.best_metric=micro_f1"])
    assert recipe.model.class_weights == [1, 2]
