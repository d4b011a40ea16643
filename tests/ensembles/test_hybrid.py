"""`longbert hybrid RUN`: the hybrid's folder is a model every path runs the same way. Its recorded test rows (the
run's neural probabilities mixed with the TF-IDF half's) equal what evaluate, predict and the transformers model
compute from the saved folder; ONNX export refuses it in one line; bad input is one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from longbert.cli import app
from longbert.ensembles.hybrid import mix_probabilities
from longbert.modeling.calibration import Calibration

pytestmark = pytest.mark.heavy  # trains a tiny run

runner = CliRunner()


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_hybrid_folder_runs_as_its_recorded_predictions_say(tiny_recipe, tmp_path):
    import longbert
    from longbert.evaluation.evaluate import evaluate

    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.epochs=1"]))
    answer = runner.invoke(app, ["hybrid", str(result.folder)])
    assert answer.exit_code == 0, answer.output
    assert "hybrid written to" in answer.output and "chosen on 15 validation documents" in answer.output
    folder = result.folder / "hybrid"
    summary = json.loads((folder / "hybrid.json").read_text())
    assert 0 <= summary["mix"] <= 1 and summary["C"] in (0.5, 2.0, 8.0, 32.0)
    recorded = np.array([r["probabilities"] for r in rows(folder / "predictions-test.jsonl")])
    # The saved hybrid, run from its folder through LongDocumentClassifier.forward, gives what mixing the base run's
    # reloaded neural probabilities (before the run's calibration) with the TF-IDF half gives (mix_probabilities,
    # which the recorded rows came from), calibrated as a whole by the hybrid's own calibration, fitted on validation.
    calibration = Calibration.from_dict(summary["calibration"])
    evaluate(result.folder, "test", precision="fp32")
    neural = np.array([r.get("uncalibrated", r["probabilities"])
                       for r in rows(result.folder / "predictions-test.jsonl")])
    evaluate(folder, "test", precision="fp32")
    got = np.array([r["probabilities"] for r in rows(folder / "predictions-test.jsonl")])
    model = longbert.LongDocumentClassifier.from_pretrained(folder)
    assert model.settings.temperatures == (None if calibration.method == "none" else calibration.temperatures)
    documents = [torch.as_tensor(d) for d in model.tokenize(
        [json.loads(line)["text"] for line in open(_data_path(tiny_recipe) / "test.jsonl")])[0]]
    np.testing.assert_allclose(got, calibration.apply(mix_probabilities(model.lexical, neural, documents)),
                               atol=2e-5)
    # The recorded rows mixed the training run's own test predictions: the same up to that run's rounding.
    np.testing.assert_allclose(got, recorded, atol=5e-3)
    # predict and the transformers model give the same probabilities from texts.
    assert model.lexical is not None and model.lexical.mix == summary["mix"]
    corpus_texts = [json.loads(line)["text"] for line in open(_data_path(tiny_recipe) / "test.jsonl")][:6]
    predicted = model.predict(corpus_texts, precision="fp32")
    hf = longbert.LongbertForSequenceClassification.from_pretrained(folder, precision="fp32")
    encoded = hf_inputs(model.tokenizer, corpus_texts)
    with torch.no_grad():
        hf_probabilities = hf(**encoded).logits.softmax(-1).numpy()
    np.testing.assert_allclose([list(p["probabilities"].values()) for p in predicted], hf_probabilities, atol=1e-5)
    # The mix is not the neural model alone unless validation chose so.
    if summary["mix"] < 1:
        assert not np.allclose(recorded, neural, atol=1e-3)
    card = (folder / "best" / "README.md").read_text()
    assert "**Hybrid.**" in card and f"weight {summary['mix']:.2f}" in card
    # ONNX cannot carry the TF-IDF half: one line, before anything is written.
    answer = runner.invoke(app, ["export", str(folder), "--output", str(tmp_path / "onnx")])
    assert answer.exit_code == 2 and "is a hybrid model: its TF-IDF half is not exported to ONNX" in answer.output
    assert not (tmp_path / "onnx").exists()
    # nor embedded: once the neural half's vector, silently
    (tmp_path / "in.txt").write_text("a review\n")
    answer = runner.invoke(app, ["embed", str(folder), str(tmp_path / "in.txt"), "-o", str(tmp_path / "v.npy")])
    assert answer.exit_code == 2 and "is a hybrid model: its TF-IDF half has no document vector" in answer.output
    assert not (tmp_path / "v.npy").exists()
    # --output that is a file is one line; the run is left as it was.
    (tmp_path / "file").write_text("x")
    answer = runner.invoke(app, ["hybrid", str(result.folder), "--output", str(tmp_path / "file")])
    assert answer.exit_code == 2 and answer.output.strip().endswith("is a file; the hybrid is written as a folder")


def _run_folder(tmp_path):
    """What a finished run folder holds, as far as `hybrid` looks before any work: its refusals need no training."""
    run = tmp_path / "run"
    for name in ("best", "checkpoint"):
        (run / name).mkdir(parents=True)
        (run / name / "weights").write_text(name)
    for name in ("recipe.yaml", "metrics.json", "metrics.md", "predictions-validation.jsonl"):
        (run / name).write_text(name)
    return run


def _contents(folder):
    return sorted((str(p.relative_to(folder)), p.read_text() if p.is_file() else None) for p in folder.rglob("*"))


@pytest.mark.parametrize("where", ["run", "parent"])
def test_hybrid_refuses_to_write_over_the_run_folder_and_deletes_nothing(tmp_path, where):
    run = _run_folder(tmp_path)
    before = _contents(tmp_path)
    output = run if where == "run" else tmp_path
    answer = runner.invoke(app, ["hybrid", str(run), "--output", str(output)])
    assert answer.exit_code == 2 and answer.output == (
        f"error: --output {output} is the run folder {run} or holds it; the hybrid is written to a folder of its own "
        f"(default {run / 'hybrid'})\n")
    assert _contents(tmp_path) == before


def test_hybrid_refuses_a_folder_of_other_files_and_deletes_nothing(tmp_path):
    run = _run_folder(tmp_path)
    other = tmp_path / "mine"
    other.mkdir()
    (other / "thesis.tex").write_text("years of work")
    before = _contents(tmp_path)
    answer = runner.invoke(app, ["hybrid", str(run), "--output", str(other)])
    assert answer.exit_code == 2 and answer.output == (
        f"error: --output {other} already holds files this command did not write (it has no hybrid.json); name a new "
        "or empty folder\n")
    assert _contents(tmp_path) == before


def test_an_empty_output_is_one_line(tmp_path, monkeypatch):
    run = _run_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _contents(tmp_path)
    answer = runner.invoke(app, ["hybrid", str(run), "--output", ""])
    assert answer.exit_code == 2 and answer.output == (
        "error: --output '.' names no folder of its own; name a new folder to write\n")
    assert _contents(tmp_path) == before


def test_hybrid_needs_a_finished_run(tmp_path):
    answer = runner.invoke(app, ["hybrid", str(tmp_path)])
    assert answer.exit_code == 2 and answer.output.strip() == (
        f"error: {tmp_path} is not a finished longbert run folder (it needs recipe.yaml and best/)")


def _data_path(overrides):
    from pathlib import Path

    return Path(next(o for o in overrides if o.startswith("data.path=")).split("=", 1)[1])


def hf_inputs(tokenizer, texts):
    return tokenizer(texts, padding=True, return_tensors="pt", truncation=False)
