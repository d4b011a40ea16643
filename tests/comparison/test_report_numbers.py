"""What a report says about groups of test documents: when ids name groups (a probe's depth-0600-000123), every row
(strategies, the ensemble, the baseline aligned by position) gets its accuracy per group, and the report a table;
ids that are row numbers or that name too many groups give none."""

from __future__ import annotations

import pytest

from longbert.comparison.report_numbers import accuracy_by_group, id_group
from longbert.evaluation.predictions import PredictionRow


def row(predicted: int, id=None) -> PredictionRow:
    return PredictionRow(index=0, n_tokens=900, label=1, probabilities=[0.5, 0.5], predicted=predicted, id=id)


def rows(ids, right):
    return [row(int(r), i) for i, r in zip(ids, right)]


def test_ids_name_their_group():
    assert id_group(row(1, "depth-0600-000123")) == "depth-0600"
    assert id_group(row(1, "majority-pnn-7")) == "majority-pnn"
    assert [id_group(row(1, v)) for v in (7, "plain", "-x", None)] == [None, None, None, None]


def test_accuracy_per_group_for_every_row():
    ids = ["depth-0000-1", "depth-0600-2", "depth-0000-3", "depth-0600-4"]
    baseline = [row(p) for p in (1, 0, 1, 1)]  # no ids: aligned by position
    table = accuracy_by_group({"truncate": rows(ids, [1, 0, 1, 0]), "chunk": rows(ids, [1, 1, 0, 1]),
                               "tfidf": baseline})
    assert table["groups"] == ["depth-0000", "depth-0600"] and table["documents"] == {"depth-0000": 2,
                                                                                      "depth-0600": 2}
    assert table["accuracy"] == {"truncate": {"depth-0000": 1.0, "depth-0600": 0.0},
                                 "chunk": {"depth-0000": 0.5, "depth-0600": 1.0},
                                 "tfidf": {"depth-0000": 1.0, "depth-0600": 0.5}}


@pytest.mark.parametrize("ids", [[0, 1, 2, 3], ["a-1", "a-2", "a-3", "a-4"], ["a-1", "b-1", 7, "b-2"],
                                 [f"g{k}-1" for k in range(25)]])
def test_no_table_without_a_design(ids):
    assert accuracy_by_group({"truncate": rows(ids, [1] * len(ids))}) is None


def test_the_budget_of_a_frozen_compare_gives_the_epochs_its_head_trained():
    from longbert.comparison.report_numbers import _budget
    from longbert.config import load_recipe

    full = load_recipe(None, ["train.epochs=3", "train.frozen_head_epochs=30"])
    frozen = load_recipe(None, ["train.epochs=3", "train.frozen_head_epochs=30", "model.finetune=frozen"])
    assert _budget(full, {"chunk": 63}, None)["epochs"] == 3
    assert _budget(frozen, {"chunk": 1890}, None)["epochs"] == 30
