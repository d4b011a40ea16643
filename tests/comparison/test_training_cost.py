"""compare's report says how each end-to-end stage read (train.reading): its time and the tokens it read with and
without gradient; a report of runs that record none renders without the section."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from longbert.comparison.page import build_blocks
from longbert.comparison.training_cost import training_cost_blocks

COMMITTED = Path(__file__).resolve().parents[2] / "reports" / "compare_imdb"


def committed_results() -> dict:
    """The committed report's results as runs that record no head stage or reading left them."""
    results = json.loads((COMMITTED / "results.json").read_text())
    for entry in results["strategies"].values():
        entry.pop("head_stage", None)
        entry.pop("reading", None)
    return results


def test_each_strategy_gets_a_row_of_its_stage_times_and_tokens():
    results = committed_results()
    first, second = results["strategy_order"][:2]
    results["strategies"][first]["head_stage"] = {"train_seconds": 44.1}
    results["strategies"][first]["reading"] = {
        "grad_units": 1, "random_units": 1, "refresh_epochs": 1, "frozen_layers": 3, "seconds": 250.0,
        "tokens_with_gradient": 1_250_000,
        "tokens_without_gradient": 900_000, "tokens_from_cache": 3_000_000, "tokens_below_frozen_layers": 900_000}
    results["strategies"][second]["reading"] = {
        "grad_units": None, "random_units": None, "frozen_layers": 0, "seconds": 30.0, "tokens_with_gradient": 10_000,
        "tokens_without_gradient": 0, "tokens_from_cache": 0, "tokens_below_frozen_layers": 0,
        "not_applied": "strategy bigbird does not read its units as independent windows"}
    blocks = training_cost_blocks(results)
    assert blocks[0] == ("h", 2, "Training cost")
    rows = {row[0]: row for row in blocks[-1][2]}
    assert rows[first][1:] == ["44.1 s", "4.2 min", "1.25", "0.90", "3.00", "0.90",
                               "top 1 + 1 random with gradient, the cache read anew every 1 epoch(s); 3 lower "
                               "layers frozen, cached"]
    assert rows[second][1:3] == ["n/a", "30.0 s"] and "does not apply" in rows[second][-1]
    assert ("h", 2, "Training cost") in build_blocks(results)


def test_runs_that_record_no_reading_leave_the_section_out():
    results = copy.deepcopy(committed_results())
    assert training_cost_blocks(results) == []
    assert ("h", 2, "Training cost") not in build_blocks(results)
