"""The two statistics a comparison report quotes: a Wilson score interval for an accuracy, and the exact McNemar
test for whether two classifiers differ on the same test documents."""

from __future__ import annotations

import math


def wilson_interval(correct: int, total: int, z: float = 1.96) -> list[float] | None:
    """95% Wilson score interval of a proportion."""
    if total == 0:
        return None
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar test on the documents where exactly one of two classifiers is right."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, j) for j in range(k + 1))
    return min(1.0, 2 * tail / 2**n)
