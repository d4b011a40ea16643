"""How long a document is, in the words every report uses: the long-document threshold (`LONG_TOKENS`: what one
512-position BERT pass cannot read whole), the length buckets that accuracy, calibration and speed are broken down
by (`LENGTH_BUCKETS`, `length_bucket`, and their titles on a page), and the longest-first order inference batches
documents in (`longest_first_order`). A leaf: it imports nothing of longbert, so data, evaluation, inference and
comparison all read these from one place.
"""

from __future__ import annotations

LONG_TOKENS = 512  # documents longer than this (WordPiece tokens with [CLS]/[SEP]) count as long
# (lowest, highest or None, name) of each bucket, shortest first
LENGTH_BUCKETS = ((0, LONG_TOKENS, "<=512"), (LONG_TOKENS + 1, 1024, "513-1024"), (1025, None, ">1024"))
BUCKET_NAMES = tuple(name for _, _, name in LENGTH_BUCKETS)
BUCKET_TITLES = {"<=512": "≤512", "513-1024": "513–1024", ">1024": ">1024"}  # as a page shows them
BUCKET_SHORT_TITLES = {"<=512": "≤512", "513-1024": "513–1k", ">1024": ">1k"}  # where a column is narrow


def length_bucket(n_tokens: int) -> str:
    """The name of the bucket a document of `n_tokens` tokens falls in."""
    for low, high, name in LENGTH_BUCKETS:
        if n_tokens >= low and (high is None or n_tokens <= high):
            return name
    raise ValueError(n_tokens)


def longest_first_order(lengths: list[int]) -> list[int]:
    """Indices of documents of these lengths, longest first (ties in their order): how inference batches them, so that
    a batch pads little and the biggest batch comes first."""
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])
