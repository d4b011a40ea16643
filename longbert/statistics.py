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
