"""`longbert quantize RUN`: int8 measured against fp32 on the run's own validation split, once, and recorded in the
kept model's training.json and card; a folder that is not a finished run is one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import longbert
from longbert.cli import app
from longbert.evaluation.evaluate import evaluate
from longbert.modeling.int8 import RECHECK_GAPS

pytestmark = pytest.mark.heavy  # trains a tiny run

runner = CliRunner()


def test_quantize_records_agreement_in_the_folder_and_its_card(tiny_recipe):
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.epochs=1"]))
    answer = runner.invoke(app, ["quantize", str(result.folder)])
    assert answer.exit_code == 0, answer.output
    assert "int8 against fp32 on 15 validation documents: labels agree on" in answer.output
    measured = json.loads((result.folder / "best" / "training.json").read_text())["int8"]
    assert measured["documents"] == 15 and measured["split"] == "validation" and 0.5 <= measured["agreement"] <= 1
    # The recheck gap is the smallest that reaches the target on validation; int8 then runs with it.
    assert measured["recheck_gap"] in RECHECK_GAPS and 0 <= measured["rechecked"] <= 1
    assert measured["agreement"] >= 0.99 or measured["recheck_gap"] == RECHECK_GAPS[-1]
    assert measured["agreement"] >= measured["agreement_plain"]
    reloaded = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    assert reloaded.for_precision("int8").recheck_gap == measured["recheck_gap"]
    # The fp32 accuracy is the kept model's own on validation, as evaluate measures it.
    assert measured["accuracy_fp32"] == pytest.approx(evaluate(result.folder, "validation", precision="fp32")[
        "accuracy"])
    card = (result.folder / "best" / "README.md").read_text()
    assert "int8" in card and f"{100 * measured['agreement']:.1f}%" in card
    # The record survives a reload and a save elsewhere.
    model = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    model.save_pretrained(result.folder.parent / "copy")
    assert json.loads((result.folder.parent / "copy" / "training.json").read_text())["int8"] == measured


def test_quantize_needs_a_finished_run(tmp_path):
    answer = runner.invoke(app, ["quantize", str(tmp_path)])
    assert answer.exit_code == 2 and answer.output.strip() == (
        f"error: {tmp_path} is not a finished longbert run folder (it needs recipe.yaml and best/)")


@pytest.mark.parametrize("value", ["1.5", "-0.1"])
def test_an_agreement_target_outside_0_to_1_is_refused(tmp_path, value):
    answer = runner.invoke(app, ["quantize", str(tmp_path), "--agreement", value])
    assert answer.exit_code == 2 and "--agreement" in answer.output
