"""The most each count a user gives on the command line can plan (`check_counts`), so that an absurd count is one
line before any work instead of a process that plans for ever."""

from __future__ import annotations

from typing import Optional

from longbert.errors import LongbertError

# The most each count option can plan, and why. A larger value is refused in one line before any work (a value
# below an option's lowest is refused as before: by typer's `min`, or by the library). Without a ceiling,
# `compare --seeds 99999999999` plans a recipe per seed and strategy, silently, for ever.
COUNT_CEILINGS = {
    "--seeds": (100, "each seed trains every strategy once more"),
    "--batch-size": (4096, "documents read in one inference step"),
    "--max-batch": (4096, "texts read in one inference step"),
    "--max-request-bytes": (1 << 30, "1 GiB: a request's body is held in memory whole"),
    "--max-request-texts": (100_000, "texts one request may hold"),
    "--max-request-tokens": (100_000_000, "tokens one request's texts may come to"),
    "--parity-documents": (10_000, "each is read by PyTorch and by onnxruntime"),
}


def check_counts(values: dict[str, Optional[int]]) -> None:
    """Refuse, in one LongbertError line, the first count option in `values` (option -> value; None: not given)
    above its ceiling in COUNT_CEILINGS."""
    for option, value in values.items():
        ceiling, why = COUNT_CEILINGS[option]
        if value is not None and value > ceiling:
            raise LongbertError(f"{option} must be at most {ceiling:,} ({why}), got {value:,}")
