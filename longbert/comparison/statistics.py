"""The statistics a comparison report quotes, all from scipy's binomial distribution: a Wilson score interval for an
accuracy, the exact McNemar test for whether two classifiers differ on the same test documents, and the smallest
difference that test detects with 80% power; and Holm's correction of a family of such tests (scipy has none)."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom, binomtest


def wilson_interval(correct: int, total: int, confidence: float = 0.95) -> list[float] | None:
    """[low, high] Wilson score interval of the proportion correct / total; None when there is nothing to count."""
    if total == 0:
        return None
    interval = binomtest(correct, total).proportion_ci(confidence_level=confidence, method="wilson")
    return [float(interval.low), float(interval.high)]


def holm(p_values: dict) -> dict:
    """Holm's step-down adjustment of a family of p-values ({test: p} -> {test: adjusted p}): the k-th smallest of m
    is multiplied by m - k + 1, capped at 1, and never falls below an adjusted p before it. An adjusted p below alpha
    rejects that test with the family-wise error rate held at alpha, whatever the tests' dependence (Holm 1979)."""
    adjusted, running = {}, 0.0
    ordered = sorted(p_values, key=lambda k: p_values[k])
    for rank, key in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - rank) * p_values[key]))
        adjusted[key] = running
    return {key: adjusted[key] for key in p_values}


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided p-value of the exact McNemar test, from the discordant documents only: `only_a` right for A alone,
    `only_b` right for B alone. Under "A and B are equally good" each discordant document is a fair coin flip,
    so this is the exact binomial test of min(only_a, only_b) successes in only_a + only_b tries at p = 1/2.
    1.0 when there are no discordant documents (nothing tells the two apart)."""
    if only_a + only_b == 0:
        return 1.0
    return float(binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue)


def detectable_difference(documents: int, discordant: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest difference in accuracy (a proportion, 0.03 = 3 points) that the exact McNemar test (`mcnemar_p`,
    the test reports run) on `documents` documents finds significant (p < `alpha`) with probability at least
    `power`, when the two classifiers disagree about as often as they did here (`discordant` documents where exactly
    one was right). None when nothing was discordant, or when even the largest possible difference would be missed
    more often than that (the test cannot resolve any difference from this sample).

    The power is the test's own (`exact_mcnemar_power`), not a normal approximation's: the exact test is
    conservative, so an approximation overstates its power and understates this difference. Power grows with the
    difference, so bisection finds where it crosses `power`; the upper end is returned, so that the power at the
    reported difference is never short of what is stated."""
    if documents <= 0 or discordant <= 0:
        return None
    share = discordant / documents
    power_at = exact_mcnemar_power(documents, share, alpha)
    if power_at(share) < power:  # the largest possible difference: every discordant document favours one side
        return None
    low, high = 0.0, share  # power_at(low) < power <= power_at(high)
    for _ in range(64):  # the interval halves each time: 64 steps reach the resolution of a float
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if power_at(middle) >= power:
            high = middle
        else:
            low = middle
    return float(high)


def exact_mcnemar_power(documents: int, share: float, alpha: float = 0.05):
    """difference -> the probability that the exact McNemar test (`mcnemar_p` < `alpha`) finds two classifiers
    different on `documents` paired documents, when a document is right for A alone with probability
    (share + difference) / 2 and for B alone with (share - difference) / 2 (0 <= difference <= share).

    Unconditional power: the discordant count m is Binomial(documents, share); given m, A's part of it is
    Binomial(m, q), q = (share + difference) / (2 share); the test rejects when the rarer side has at most k_m
    documents, k_m the largest k with 2 P(X <= k) < alpha for X ~ Binomial(m, 1/2) (scipy's two-sided p-value at
    p = 1/2). Counts m with probability below 1e-12 at either end are left out (they change the power by less)."""
    lowest, highest = (int(binom.ppf(1e-12, documents, share)), int(binom.isf(1e-12, documents, share)))
    m = np.arange(lowest, min(highest, documents) + 1)
    weight = binom.pmf(m, documents, share)
    # ppf gives the smallest k with P(X <= k) >= alpha / 2, whose p-value is at least alpha: one fewer rejects.
    rejects_up_to = binom.ppf(alpha / 2, m, 0.5) - 1  # -1: no split of m documents is significant

    def power_at(difference: float) -> float:
        q = min(1.0, (share + difference) / (2 * share))
        rejected = binom.cdf(rejects_up_to, m, q) + binom.sf(m - rejects_up_to - 1, m, q)
        return float(np.sum(weight * np.where(rejects_up_to >= 0, rejected, 0.0)))

    return power_at
