"""The two statistics a comparison report quotes, both from scipy's exact binomial test: a Wilson score interval
for an accuracy, and the exact McNemar test for whether two classifiers differ on the same test documents."""

from __future__ import annotations


def wilson_interval(correct: int, total: int, confidence: float = 0.95) -> list[float] | None:
    """[low, high] Wilson score interval of the proportion correct / total; None when there is nothing to count."""
    from scipy.stats import binomtest

    if total == 0:
        return None
    interval = binomtest(correct, total).proportion_ci(confidence_level=confidence, method="wilson")
    return [float(interval.low), float(interval.high)]


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided p-value of the exact McNemar test, from the discordant documents only: `only_a` right for A alone,
    `only_b` right for B alone. Under "A and B are equally good" each discordant document is a fair coin flip,
    so this is the exact binomial test of min(only_a, only_b) successes in only_a + only_b tries at p = 1/2.
    1.0 when there are no discordant documents (nothing tells the two apart)."""
    from scipy.stats import binomtest

    if only_a + only_b == 0:
        return 1.0
    return float(binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue)


def detectable_difference(documents: int, discordant: int, alpha: float = 0.05, power: float = 0.8) -> float | None:
    """The smallest difference in accuracy (a proportion, 0.03 = 3 points) that the paired test on `documents`
    documents would find significant at `alpha` with probability `power`, when the two classifiers disagree about
    as often as they did here (`discordant` documents where exactly one was right).

    Connor's (1987) normal approximation for McNemar's test: with discordant share psi and a true difference d, the
    test statistic is about normal with mean d*sqrt(n) and standard deviation sqrt(psi - d^2) under the
    alternative, sqrt(psi) under the null, so power = Phi((d*sqrt(n) - z_(1-alpha/2)*sqrt(psi)) / sqrt(psi - d^2)).
    Solved for d. None when nothing was discordant (the test cannot resolve any difference from this sample)."""
    import math

    from scipy.optimize import brentq
    from scipy.stats import norm

    if documents <= 0 or discordant <= 0:
        return None
    psi = discordant / documents
    z_alpha = norm.ppf(1 - alpha / 2)

    def shortfall(d: float) -> float:
        return norm.cdf((d * math.sqrt(documents) - z_alpha * math.sqrt(psi)) / math.sqrt(psi - d * d)) - power

    top = psi * (1 - 1e-9)  # the largest possible difference: every discordant document favours one side
    if shortfall(top) < 0:
        return None  # even the largest possible difference would be missed this often
    return float(brentq(shortfall, 1e-12, top))
