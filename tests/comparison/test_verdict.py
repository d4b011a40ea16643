"""The verdict decided from a results dict alone (no training): the most accurate overall and on long documents,
ties going to the cheaper strategy, the registry's reference strategy as what the long-document power is measured
against, the baseline groups and the choice between accuracy and cost."""

from __future__ import annotations

import pytest

from longbert.comparison.verdict import decide, verdict
from longbert.strategies.registry import strategy_names, strategy_with_role

REFERENCE = strategy_with_role("reference")
OTHERS = [n for n in strategy_names() if n != REFERENCE][:2]


def row(accuracy: float, long_accuracy: float, cost: float) -> dict:
    return {"accuracy": accuracy, "accuracy_ci95": [accuracy - 0.05, accuracy + 0.05],
            "long": {"accuracy": long_accuracy, "documents": 40, "ci95": [long_accuracy - 0.1, long_accuracy + 0.1]},
            "relative_cost": {"inference": cost}, "speed": {"documents_per_second": 100 / cost}}


def pair(a: str, b: str, documents: str, p: float, only_a: int = 6, only_b: int = 2) -> dict:
    return {"a": a, "b": b, "documents": documents, "p_value": p, "n": 40 if documents == "long" else 200,
            "only_a_right": only_a, "only_b_right": only_b, "detectable_difference": 0.12}


def synthetic_results(order: list[str], rows: dict, comparisons: list[dict], baseline: dict | None = None) -> dict:
    return {"strategy_order": order, "strategies": rows, "comparisons": comparisons, "baseline": baseline,
            "data": {"long_documents": 40, "test_documents": 200, "long_tokens": 512}}


def test_the_long_document_power_is_measured_against_the_registrys_reference_strategy():
    best, other = OTHERS
    rows = {other: row(0.80, 0.70, 2.0), REFERENCE: row(0.81, 0.60, 1.0), best: row(0.85, 0.80, 3.0)}
    comparisons = [pair(best, REFERENCE, "long", 0.01), pair(best, other, "long", 0.2),
                   pair(best, REFERENCE, "all", 0.02), pair(best, other, "all", 0.3)]  # Holm: 0.04, 0.3
    # The reference is listed last but one, and is neither first nor best: the registry names it, not the order.
    decision = decide(synthetic_results([other, REFERENCE, best], rows, comparisons))
    assert (decision.best, decision.best_long, decision.reference) == (best, best, REFERENCE)
    assert decision.power["only_a_right"] == 6 and decision.power["a"] == best
    assert (decision.fastest, decision.gain_is_real) == (REFERENCE, True)
    power = next(line for line in verdict(synthetic_results([other, REFERENCE, best], rows, comparisons))
                 if line.startswith("Power on the long documents"))
    assert f"of which {best} and {REFERENCE} disagree on 8" in power


def test_when_the_reference_is_best_on_long_documents_it_is_measured_against_the_first_other():
    first, second = OTHERS
    rows = {first: row(0.80, 0.60, 1.0), second: row(0.79, 0.65, 2.0), REFERENCE: row(0.78, 0.90, 3.0)}
    comparisons = [pair(REFERENCE, first, "long", 0.04, only_a=9, only_b=1)]
    decision = decide(synthetic_results([first, second, REFERENCE], rows, comparisons))
    assert (decision.best_long, decision.reference) == (REFERENCE, first)
    # Stored as (reference, first) and asked for the same way round: no swap.
    assert (decision.power["only_a_right"], decision.power["only_b_right"]) == (9, 1)


def test_ties_go_to_the_cheaper_strategy_and_a_gain_within_the_noise_is_said_so():
    cheap, dear = OTHERS
    tied = {cheap: row(0.80, 0.70, 1.0), dear: row(0.80, 0.70, 4.0)}
    decision = decide(synthetic_results([dear, cheap], tied, []))
    assert decision.best == decision.best_long == decision.fastest == cheap and decision.gain_is_real is None
    assert verdict(synthetic_results([dear, cheap], tied, []))[-2] == (
        f"Choice: {cheap} is both the most accurate and the cheapest here.")

    better = {cheap: row(0.80, 0.70, 1.0), dear: row(0.82, 0.75, 4.0)}
    results = synthetic_results([cheap, dear], better, [pair(dear, cheap, "all", 0.4)])
    assert decide(results).gain_is_real is False
    assert "within the noise of this test set (Holm-adjusted paired test p ≥ 0.05)" in verdict(results)[-2]
    assert verdict(results)[-1].startswith("Every p-value in this verdict is an exact McNemar test Holm-adjusted")


def test_each_strategy_is_placed_against_the_baseline_by_the_paired_test():
    a, b = OTHERS
    rows = {a: row(0.90, 0.8, 1.0), b: row(0.70, 0.6, 2.0), REFERENCE: row(0.86, 0.7, 1.5)}
    base = {"name": "tfidf", "accuracy": 0.85, "accuracy_ci95": [0.8, 0.9], "train_seconds": 3.0}
    comparisons = [pair(a, "tfidf", "all", 0.001), pair("tfidf", b, "all", 0.002), pair(REFERENCE, "tfidf", "all", 0.5)]
    results = synthetic_results([a, b, REFERENCE], rows, comparisons, base)
    assert decide(results).against_baseline == {a: "better", b: "worse", REFERENCE: "same"}
    line = next(line for line in verdict(results) if line.startswith("Classical baseline"))
    # Holm over the three rows: 0.001 * 3, 0.002 * 2, 0.5 * 1
    assert f"Significantly better than it: {a} +5.0 points, p = 0.003" in line
    assert f"Not distinguishable from it: {REFERENCE} +1.0 points, p = 0.5" in line
    assert f"Significantly worse than it: {b} -15.0 points, p = 0.004" in line
    assert line.endswith("the baseline trains in seconds and needs no GPU.")


@pytest.mark.parametrize("count", [1, 2])
def test_a_single_strategy_gets_only_the_share_of_long_documents(count):
    names = OTHERS[:count]
    results = synthetic_results(names, {n: row(0.8, 0.7, 1.0 + k) for k, n in enumerate(names)}, [])
    lines = verdict(results)
    assert lines[0].startswith("40 of 200 test documents (20.0%) are longer than 512 tokens")
    assert (len(lines) == 1) == (count == 1)  # no test, so no word on the correction either


def test_a_hybrid_row_is_placed_against_the_baseline_and_said_with_how_it_was_chosen():
    a, b = OTHERS
    rows = {a: row(0.80, 0.8, 1.0), b: row(0.81, 0.6, 2.0)}
    base = {"name": "tfidf", "accuracy": 0.85, "accuracy_ci95": [0.8, 0.9], "train_seconds": 3.0}
    hybrid = {"name": "hybrid", "members": [b, "tfidf"], "mix": 0.45, "C": 8.0, "base_chosen_by": "accuracy",
              "chosen_by": "validation log loss of the mixed probabilities", "accuracy": 0.88,
              "accuracy_ci95": [0.86, 0.9]}
    comparisons = [pair(a, "tfidf", "all", 0.001, 2, 6), pair(b, "tfidf", "all", 0.01, 2, 6),
                   pair("hybrid", "tfidf", "all", 0.004), pair("hybrid", a, "all", 0.0001), pair(b, "hybrid", "all",
                                                                                                  0.0002, 1, 9)]
    results = {**synthetic_results([a, b], rows, comparisons, base), "hybrid": hybrid}
    assert decide(results).against_baseline == {a: "worse", b: "worse", "hybrid": "better"}
    lines = verdict(results)
    line = next(line for line in lines if line.startswith("Classical baseline"))
    assert f"Significantly better than it: hybrid ({b} + tfidf) +3.0 points, p = 0.008" in line  # Holm: 2nd of 3
    assert line.endswith("the baseline trains in seconds and needs no GPU.")  # the strategies alone do not beat it
    said = next(line for line in lines if line.startswith("Hybrid of"))
    assert said.startswith(f"Hybrid of {b} and TF-IDF over its token ids (probabilities mixed at neural weight 0.45, "
                           "TF-IDF C = 8.0, both chosen on validation log loss")
    assert f"vs {a} p = 0.0003, vs {b} p = 0.0004, vs tfidf p = 0.004." in said  # Holm: 3x, 2x, 1x


def test_holm_multiplies_the_kth_smallest_of_m_by_m_minus_k_plus_one_and_keeps_the_order():
    from longbert.comparison.statistics import holm

    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert holm({"a": 0.6, "b": 0.001}) == pytest.approx({"a": 0.6, "b": 0.002})
    assert holm({"a": 0.7, "b": 0.8}) == pytest.approx({"a": 1.0, "b": 1.0})  # capped at 1
    assert holm({}) == {} and holm({"only": 0.02}) == {"only": 0.02}


def test_rows_that_beat_the_baseline_only_before_the_correction_are_not_called_better():
    a, b = OTHERS
    rows = {a: row(0.88, 0.8, 1.0), b: row(0.88, 0.8, 2.0)}
    base = {"name": "tfidf", "accuracy": 0.85, "accuracy_ci95": [0.8, 0.9], "train_seconds": 3.0}
    comparisons = [pair(a, "tfidf", "all", 0.03), pair(b, "tfidf", "all", 0.04)]  # each below 0.05 alone
    results = synthetic_results([a, b], rows, comparisons, base)
    assert decide(results).against_baseline == {a: "same", b: "same"}  # Holm: 0.06 and 0.06
    line = next(line for line in verdict(results) if line.startswith("Classical baseline"))
    assert f"Not distinguishable from it: {a} +3.0 points, p = 0.06; {b} +3.0 points, p = 0.06" in line


def test_a_gain_significant_alone_but_not_after_the_correction_is_said_to_be_noise():
    cheap, middle = OTHERS
    rows = {cheap: row(0.80, 0.7, 1.0), middle: row(0.81, 0.7, 2.0), REFERENCE: row(0.84, 0.75, 4.0)}
    comparisons = [pair(REFERENCE, cheap, "all", 0.03), pair(REFERENCE, middle, "all", 0.04)]
    results = synthetic_results([cheap, middle, REFERENCE], rows, comparisons)
    decision = decide(results)
    assert (decision.best, decision.fastest, decision.gain_is_real) == (REFERENCE, cheap, False)
    said = verdict(results)
    assert f"vs {cheap} p = 0.06 (not significant), vs {middle} p = 0.06 (not significant)" in said[1]
    assert "within the noise of this test set" in said[-2]


def test_the_choice_line_does_not_contradict_the_model_to_deploy():
    """compare named one model on test ('prefer the cheaper truncate') and deployed another, chosen on validation;
    with a model to deploy, the choice line says only what the test shows."""
    cheap, dear = OTHERS
    better = {cheap: row(0.80, 0.70, 1.0), dear: row(0.82, 0.75, 4.0)}
    results = synthetic_results([cheap, dear], better, [pair(dear, cheap, "all", 0.4)])
    assert "prefer the cheaper" in verdict(results)[-2], "without a model to deploy the test's advice stands"
    results["deployable"] = {"row": dear, "metric": "macro_f1", "folder": "runs/x", "validation": {cheap: 0.8,
                                                                                                   dear: 0.9}}
    lines = verdict(results)
    choice = next(line for line in lines if line.startswith("Choice:"))
    assert choice.endswith("(Holm-adjusted paired test p ≥ 0.05); the test cannot tell them apart.")
    assert not any("prefer" in line for line in lines)
    tied = {cheap: row(0.80, 0.70, 1.0), dear: row(0.80, 0.70, 4.0)}
    results = synthetic_results([dear, cheap], tied, [])
    results["deployable"] = {"row": dear, "metric": "macro_f1", "folder": "runs/x", "validation": {cheap: 0.8,
                                                                                                   dear: 0.9}}
    choice = next(line for line in verdict(results) if line.startswith("Choice:"))
    assert choice == (f"Choice: on test, {cheap} is both the most accurate and the cheapest strategy trained; the "
                      "model to deploy is chosen on validation, not on test.")
