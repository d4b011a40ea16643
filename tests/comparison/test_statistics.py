"""The statistics of a comparison report against numbers worked out by hand, and the paired counts they are
computed from."""

from __future__ import annotations

import functools
import math

import pytest

from longbert.comparison.report_numbers import paired_comparisons
from longbert.comparison.statistics import mcnemar_p, wilson_interval
from longbert.evaluation.predictions import PredictionRow


def _wilson_by_formula(correct: int, total: int, z: float = 1.959963984540054) -> list[float]:
    """Wilson (1927): (p + z²/2n ± z·sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n)."""
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [centre - half, centre + half]


def test_wilson_interval_of_8_in_10_is_the_textbook_one():
    low, high = wilson_interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)
    assert all(type(v) is float for v in (low, high))  # plain floats: results.json is written with json


@pytest.mark.parametrize("correct,total", [(0, 10), (10, 10), (3, 7), (1, 1), (412, 500)])
def test_wilson_interval_follows_the_formula_and_stays_in_0_1(correct, total):
    low, high = wilson_interval(correct, total)
    assert [low, high] == pytest.approx(_wilson_by_formula(correct, total), abs=1e-9)
    assert 0 <= low <= correct / total <= high <= 1
    low99, high99 = wilson_interval(correct, total, confidence=0.99)
    assert high99 - low99 > high - low  # more confidence, a wider interval


def test_wilson_interval_of_nothing_is_none():
    assert wilson_interval(0, 0) is None


def test_exact_mcnemar_test_gives_the_binomial_tail():
    # b=10 documents right only for A, c=2 only for B: p = 2 * P(X <= 2), X ~ Binomial(12, 1/2) = 2 * 79 / 4096.
    assert mcnemar_p(10, 2) == pytest.approx(2 * (1 + 12 + 66) / 2**12) == pytest.approx(0.0386, abs=1e-4)
    assert mcnemar_p(2, 10) == mcnemar_p(10, 2)
    for b, c in ((0, 6), (3, 9), (20, 31)):
        n = b + c
        tail = sum(math.comb(n, j) for j in range(min(b, c) + 1)) / 2**n
        assert mcnemar_p(b, c) == pytest.approx(min(1.0, 2 * tail), rel=1e-9)
    assert mcnemar_p(7, 7) == 1.0  # a tie is no evidence either way


def test_mcnemar_without_discordant_documents_is_1():
    assert mcnemar_p(0, 0) == 1.0


def _row(n_tokens: int, right: bool) -> PredictionRow:
    return PredictionRow(index=0, n_tokens=n_tokens, label=1, probabilities=[0.5, 0.5], predicted=1 if right else 0)


def test_paired_comparisons_count_who_alone_was_right_on_all_and_on_long_documents():
    #            both right    only a       only a       only b       neither
    a = [_row(100, True), _row(900, True), _row(100, True), _row(900, False), _row(900, False)]
    b = [_row(100, True), _row(900, False), _row(100, False), _row(900, True), _row(900, False)]
    rows = {c["documents"]: c for c in paired_comparisons({"a": a, "b": b}, long_tokens=512)}
    assert (rows["all"]["only_a_right"], rows["all"]["only_b_right"]) == (2, 1)
    assert (rows["long"]["only_a_right"], rows["long"]["only_b_right"]) == (1, 1)
    assert rows["all"]["p_value"] == mcnemar_p(2, 1) and rows["long"]["p_value"] == 1.0
    assert {(c["a"], c["b"]) for c in rows.values()} == {("a", "b")}


def _exact_power_by_brute_force(n: int, discordant: int, difference: float, alpha: float = 0.05) -> float:
    """The probability that `mcnemar_p` itself says p < alpha, summed over the outcomes: m discordant documents
    (Binomial(n, psi)), a of them right for A alone (Binomial(m, q)); m so unlikely that it cannot matter
    (below 1e-14) is skipped."""
    from scipy.stats import binom

    psi = discordant / n
    q = (psi + difference) / (2 * psi)
    weights = binom.pmf(range(n + 1), n, psi)
    return sum(weight * float(binom.pmf(_significant(m, alpha), m, q).sum())
               for m, weight in enumerate(weights) if weight >= 1e-14)


@functools.lru_cache(maxsize=None)
def _significant(m: int, alpha: float) -> list[int]:
    """Every a for which mcnemar_p(a, m - a) < alpha. A two-sided test rejects in two tails, so each is walked from
    its end until p reaches alpha."""
    found = []
    for side in (range(m + 1), range(m, -1, -1)):
        for a in side:
            if mcnemar_p(a, m - a) >= alpha:
                break
            found.append(a)
    return found


@pytest.mark.parametrize("n,discordant", [(366, 37), (200, 40), (900, 45)])
def test_the_detectable_difference_is_where_the_exact_tests_power_reaches_80_percent(n, discordant):
    """The test reports run is the exact one; its power at the stated difference is at least 80% and just below it
    less (the normal approximation's difference, 4.64 points at n = 366, has only about 77%)."""
    from longbert.comparison.statistics import detectable_difference

    d = detectable_difference(n, discordant)
    assert _exact_power_by_brute_force(n, discordant, d) >= 0.8
    assert _exact_power_by_brute_force(n, discordant, d - 1e-6) < 0.8
    if (n, discordant) == (366, 37):
        assert round(100 * d, 2) == 4.81
        assert _exact_power_by_brute_force(n, discordant, 0.0464) < 0.79


def test_the_detectable_difference_is_found_with_the_stated_power():
    """Simulate paired test sets where the two classifiers disagree on a share psi of the documents and one is
    better by the computed difference d: the exact McNemar test should find it significant about 80% of the time."""
    import numpy as np

    from longbert.comparison.statistics import detectable_difference, mcnemar_p

    n, discordant = 1500, 150
    d = detectable_difference(n, discordant)
    assert 0.01 < d < 0.05
    psi = discordant / n
    rng = np.random.default_rng(0)
    found = 0
    trials = 400
    for _ in range(trials):
        only_a, only_b, _ = rng.multinomial(n, [(psi + d) / 2, (psi - d) / 2, 1 - psi])
        found += mcnemar_p(int(only_a), int(only_b)) < 0.05
    assert 0.72 < found / trials < 0.88
    assert detectable_difference(4 * n, 4 * discordant) < d  # more documents resolve smaller differences
    assert detectable_difference(n, 0) is None and detectable_difference(0, 0) is None
    assert detectable_difference(20, 2) is None  # too few: even the largest difference is missed too often
