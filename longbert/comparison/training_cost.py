"""The report's training-cost section: how each strategy's end-to-end stage read its documents (`train.reading`,
longbert.training.selective) and what that stage cost, beside the stages before it."""

from __future__ import annotations

from longbert.comparison.formatting import duration, number

TOKEN_COUNTS = ("tokens_with_gradient", "tokens_without_gradient", "tokens_from_cache", "tokens_below_frozen_layers")


def training_cost_blocks(results: dict) -> list[tuple]:
    """A table, one row a strategy: the head stage's time, the end-to-end stage's time, the tokens it read with
    gradient, without it (each unit cached), those it took from its cache, those read through the frozen layers alone,
    and its train.reading settings. Nothing for runs that record no reading (frozen runs, older runs)."""
    names, s = results["strategy_order"], results["strategies"]
    rows = []
    for n in names:
        reading = s[n].get("reading")
        if not reading:
            continue
        head = (s[n].get("head_stage") or {}).get("train_seconds")
        settings = "every unit with gradient" if reading.get("grad_units") is None else (
            f"top {reading['grad_units']} + {reading['random_units']} random with gradient"
            + (f", the cache read anew every {reading['refresh_epochs']} epoch(s)" if reading.get("refresh_epochs")
               else ""))
        if reading.get("frozen_layers"):
            settings += f"; {reading['frozen_layers']} lower layers frozen, cached"
        if reading.get("not_applied"):
            settings += " (train.reading does not apply: see the run's metrics.json)"
        counts = [number(reading.get(key, 0) / 1e6, 2) for key in TOKEN_COUNTS]
        rows.append([n, duration(head), duration(reading.get("seconds")), *counts, settings])
    if not rows:
        return []
    return [("h", 2, "Training cost"),
            ("p", "How each end-to-end stage read its training documents, over all its epochs (millions of tokens). "
                  "Without gradient: a unit read only to refresh its cached vector. From the cache: a unit whose last "
                  "vector was used instead of reading it. Below frozen layers: read once through the frozen lower "
                  "layers, their states kept. The head stage trains the pooler and head on cached units first."),
            ("table", ["strategy", "head stage", "end-to-end stage", "with gradient (M)", "without (M)",
                       "from the cache (M)", "below frozen layers (M)", "train.reading"], rows)]
