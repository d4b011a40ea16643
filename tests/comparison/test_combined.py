"""compare's ensemble row: built from the runs' kept validation predictions (members chosen as
`longbert.ensembles.choice` chooses them), its test rows scored, and a comparison that cannot have one says why."""

from __future__ import annotations

import json

import pytest

from helpers import ENSEMBLE_LABELS, ensemble_validation, prediction_rows
from longbert.comparison.combined import build_ensemble

rows = prediction_rows
LABELS = ENSEMBLE_LABELS
VALIDATION = ensemble_validation()


def write_validation(folder, validation_rows):
    folder.mkdir()
    (folder / "predictions-validation.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n"
                                                                 for r in validation_rows))
    return folder


def test_build_reads_the_runs_validation_and_scores_the_test_rows(tmp_path):
    dirs = {name: write_validation(tmp_path / name, VALIDATION[name]) for name in VALIDATION}
    test = {name: rows(LABELS, [r.probabilities for r in VALIDATION[name]]) for name in VALIDATION}
    summary, test_rows, note = build_ensemble(dirs, test, "loss", False, ["neg", "pos"])
    assert note is None and summary["members"] == ["a", "b"]
    assert summary["chosen_by"] == "validation macro_f1"  # loss has no hard predictions: macro-F1 instead
    assert summary["metrics"]["accuracy"] == 1.0 and len(test_rows) == 4


@pytest.mark.parametrize("case", ["missing", "multi_label", "one"])
def test_no_ensemble_is_said_plainly(tmp_path, case):
    dirs = {name: write_validation(tmp_path / name, VALIDATION[name]) for name in ("a", "b")}
    test = {name: VALIDATION[name] for name in dirs}
    if case == "missing":
        (dirs["b"] / "predictions-validation.jsonl").unlink()
        summary, _, note = build_ensemble(dirs, test, "accuracy", False, ["neg", "pos"])
        assert summary is None and note.startswith("no ensemble row: b kept no validation predictions")
    elif case == "multi_label":
        summary, _, note = build_ensemble(dirs, test, "accuracy", True, ["neg", "pos"])
        assert summary is None and "multi-label" in note
    else:
        assert build_ensemble({"a": dirs["a"]}, {"a": test["a"]}, "accuracy", False, ["neg", "pos"]) == (
            None, None, None)
