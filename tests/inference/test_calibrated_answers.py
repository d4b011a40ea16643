"""A calibrated model answers the same calibrated probabilities every way it runs: `model.predict` and `longbert
predict`, serve, transformers' pipeline, an exported ONNX folder and int8 (within int8's own tolerance); they differ
from the uncalibrated ones, which `--no-calibration` / `without_calibration()` give; a single-label model's labels do
not change; a folder saved before calibration existed answers as before. Abstention (`--min-confidence`) leaves a
document whose confidence is below the minimum without a label, in Python, the CLI and serve."""

from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from helpers import build_model
from longbert.cli import app
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.reads_texts import confidence

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from longbert.inference.serve import build_app, load_predictor  # noqa: E402

runner = CliRunner()
TEXTS = ["A fine film.", "Dull and far too long. " * 12, "I laughed, I cried, I left early.", "ok then"]
TEMPERATURE = 2.5
LABEL_TEMPERATURES = [0.5, 2.0, 3.0]  # the multi-label model's, one per label


def saved_model(root, name: str, model: LongDocumentClassifier, temperatures, thresholds=None):
    """`model` saved under root/name with these calibration temperatures (None: as a folder saved before they
    existed) and multi-label thresholds."""
    model.settings.temperatures, model.settings.thresholds = temperatures, thresholds
    model.save_pretrained(root / name)
    return root / name


@pytest.fixture(scope="module")
def folders(tiny_backbone_dir, tmp_path_factory):
    """One tiny single-label model saved calibrated and as before calibration existed, a multi-label one calibrated,
    and each model's fp32 logits of TEXTS. A random tiny BERT gives every text nearly the same vector: its head is
    scaled up and centred on these texts, so that they fall on both sides of 0.5 (by a little: a larger head would
    magnify float rounding past the 1e-6 the answers must agree to)."""
    root = tmp_path_factory.mktemp("calibrated")
    logits = {}
    for kind, extra, labels in (("single", [], ("neg", "pos")),
                                ("multi", ["model.problem_type=multi_label"], ("x", "y", "z"))):
        model = build_model(tiny_backbone_dir, "chunk", extra, labels=labels)
        documents, _ = model.tokenize(TEXTS)
        with torch.no_grad():
            model.head.weight.mul_(10)
            model.head.bias.sub_(model(documents).logits.mean(0))
            logits[kind] = model(documents).logits.float()  # (D, C)
        if kind == "single":
            saved_model(root, "before", model, None)
            saved_model(root, "single", model, [TEMPERATURE])
        else:
            saved_model(root, "multi", model, LABEL_TEMPERATURES, [0.3, 0.5, 0.8])
    return root, logits


def expected(folders, kind: str = "single", calibrated: bool = True) -> list[list[float]]:
    logits = folders[1][kind]
    if kind == "single":
        return (logits / (TEMPERATURE if calibrated else 1.0)).softmax(-1).tolist()
    return torch.sigmoid(logits / (torch.tensor(LABEL_TEMPERATURES) if calibrated else 1.0)).tolist()


def assert_answers(rows: list[dict], want: list[list[float]], abs: float = 1e-6) -> None:
    assert len(rows) == len(want)
    for row, p in zip(rows, want):
        assert list(row["probabilities"].values()) == pytest.approx(p, abs=abs)


def load(folders, name: str = "single") -> LongDocumentClassifier:
    return LongDocumentClassifier.from_pretrained(folders[0] / name)


def test_predict_answers_calibrated_probabilities_with_the_same_labels(folders):
    model = load(folders)
    assert model.calibrated and model.settings.temperatures == [TEMPERATURE]
    rows = model.predict(TEXTS, precision="fp32")
    assert_answers(rows, expected(folders))
    raw = expected(folders, calibrated=False)
    assert max(abs(a - b) for row, p in zip(rows, raw) for a, b in zip(row["probabilities"].values(), p)) > 1e-3
    labels = [["neg", "pos"][max((0, 1), key=p.__getitem__)] for p in raw]
    assert [r["label"] for r in rows] == labels and set(labels) == {"neg", "pos"}
    assert_answers(model.without_calibration().predict(TEXTS, precision="fp32"), raw)
    assert not model.calibrated


def test_a_folder_saved_before_calibration_loads_and_answers_as_before(folders):
    settings = json.loads((folders[0] / "before" / "longbert_config.json").read_text())
    assert "temperatures" not in settings
    model = load(folders, "before")
    assert not model.calibrated
    assert_answers(model.predict(TEXTS, precision="fp32"), expected(folders, calibrated=False))


def test_multi_label_calibration_per_label_keeps_the_decisions_without_it(folders):
    model = load(folders, "multi")
    rows = model.predict(TEXTS, precision="fp32")
    assert_answers(rows, expected(folders, "multi"))
    plain = load(folders, "multi").without_calibration()
    uncalibrated = plain.predict(TEXTS, precision="fp32")
    assert_answers(uncalibrated, expected(folders, "multi", calibrated=False))
    assert [r["labels"] for r in uncalibrated] == [r["labels"] for r in rows]  # the thresholds moved with it


def test_the_cli_predicts_calibrated_and_with_no_calibration_uncalibrated(folders, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    for options, want in (([], expected(folders)), (["--no-calibration"], expected(folders, calibrated=False))):
        out = tmp_path / "rows.jsonl"
        result = runner.invoke(app, ["predict", str(folders[0] / "single"), str(source), "-o", str(out),
                                     "--precision", "fp32", *options])
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert_answers(rows, want)
        assert "abstained" not in rows[0]


def test_serve_answers_calibrated_and_without_calibration_uncalibrated(folders):
    for calibrated, want in ((True, expected(folders)), (False, expected(folders, calibrated=False))):
        predictor, _ = load_predictor(folders[0] / "single", "fp32", calibrated)
        with TestClient(build_app(predictor, precision="fp32")) as client:
            rows = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
        assert_answers(rows, want)


def test_the_pipeline_answers_calibrated_and_the_hf_folder_round_trips(folders, tmp_path):
    from transformers import pipeline

    from longbert.hf.model import LongbertForSequenceClassification

    for name, kind in (("single", "single"), ("multi", "multi")):
        classify = pipeline("text-classification", model=str(folders[0] / name), top_k=None, device="cpu",
                            model_kwargs={"precision": "fp32"})
        scores = [{s["label"]: s["score"] for s in answer} for answer in classify(TEXTS)]
        names = list(classify.model.config.id2label.values())
        assert_answers([{"probabilities": {n: s[n] for n in names}} for s in scores], expected(folders, kind))
    raw = pipeline("text-classification", model=str(folders[0] / "single"), top_k=None, device="cpu",
                   model_kwargs={"precision": "fp32", "calibrated": False})(TEXTS)
    assert [{s["label"]: s["score"] for s in answer}["pos"] for answer in raw] == pytest.approx(
        [p[1] for p in expected(folders, calibrated=False)], abs=1e-6)
    wrapped = LongbertForSequenceClassification.from_pretrained(folders[0] / "single")
    wrapped.save_pretrained(tmp_path / "again")
    again = LongbertForSequenceClassification.from_pretrained(tmp_path / "again")
    assert again.classifier.settings.temperatures == [TEMPERATURE]


def test_int8_answers_calibrated_probabilities_within_its_tolerance(folders):
    rows = load(folders).predict(TEXTS, precision="int8")
    assert_answers(rows, expected(folders), abs=1e-2)
    plain = load(folders).without_calibration().predict(TEXTS, precision="int8")
    # The same int8 logits, divided by the temperature or not: the log-odds are 2.5 times apart, the labels the same.
    log_odds = lambda row: torch.tensor(row["probabilities"]["pos"]).logit().item()
    assert [TEMPERATURE * log_odds(r) for r in rows] == pytest.approx([log_odds(r) for r in plain], abs=1e-4)
    assert [r["label"] for r in rows] == [r["label"] for r in plain]


@pytest.mark.heavy
def test_an_exported_folder_answers_calibrated_and_its_parity_compares_like_with_like(folders, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from longbert.inference.export import export_model
    from longbert.inference.exported import ExportedClassifier

    result = export_model(folders[0] / "single", tmp_path / "onnx", parity_texts=TEXTS)
    assert result.parity["onnx_fp32"]["max_abs_probability_difference"] < 1e-5
    runtime = ExportedClassifier(tmp_path / "onnx")
    assert runtime.settings.temperatures == [TEMPERATURE]
    assert_answers(runtime.predict(TEXTS), expected(folders))
    assert_answers(runtime.without_calibration().predict(TEXTS), expected(folders, calibrated=False))


def test_export_with_no_calibration_writes_settings_without_it(folders, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    written = lambda model, folder, quantize: {"encoders": {"fp32": "encoder.onnx"}, "head": "head.onnx"}
    monkeypatch.setattr("longbert.inference.export.write_graphs", written)  # the settings are what is checked here
    for name, options in (("calibrated", []), ("plain", ["--no-calibration"])):
        result = runner.invoke(app, ["export", str(folders[0] / "multi"), "-o", str(tmp_path / name), *options])
        assert result.exit_code == 0, result.output
    settings = {name: json.loads((tmp_path / name / "export.json").read_text())["settings"]
                for name in ("calibrated", "plain")}
    assert settings["calibrated"]["temperatures"] == LABEL_TEMPERATURES
    assert "temperatures" not in settings["plain"]
    assert settings["plain"]["thresholds"] != settings["calibrated"]["thresholds"]  # moved to decide the same


def test_evaluate_takes_calibrated_false(folders, monkeypatch):
    from longbert.evaluation.evaluate import evaluate

    documents = (TEXTS, ["neg", "pos", "pos", "neg"])
    model = load(folders)
    assert "uncalibrated" in evaluate(model, documents)["calibration"]
    assert "uncalibrated" not in evaluate(model, documents, calibrated=False)["calibration"]
    assert model.calibrated  # the caller's model keeps its calibration
    seen = {}

    def fake(*args, **options):
        seen.update(options)
        raise LongbertError("stopped here")

    monkeypatch.setattr("longbert.evaluation.evaluate.evaluate", fake)
    assert runner.invoke(app, ["evaluate", str(folders[0]), "--no-calibration"]).exit_code == 2
    assert seen["calibrated"] is False


# -- abstention ------------------------------------------------------------------------------------------------------

def between(confidences: list[float]) -> float:
    """A minimum confidence that some of these reach and some do not."""
    ordered = sorted(confidences)
    return (ordered[1] + ordered[2]) / 2


@pytest.mark.parametrize("kind, key", [("single", "label"), ("multi", "labels")])
def test_documents_below_min_confidence_are_abstained_on(folders, kind, key):
    model = load(folders, kind)
    rows = model.predict(TEXTS, precision="fp32")
    sure = [confidence(model.settings, list(r["probabilities"].values())) for r in rows]
    minimum = between(sure)
    kept = model.predict(TEXTS, precision="fp32", min_confidence=minimum)
    assert [r["abstained"] for r in kept] == [s < minimum for s in sure]
    assert sum(r["abstained"] for r in kept) == 2
    for row, plain in zip(kept, rows):
        assert row["probabilities"] == plain["probabilities"]
        assert row[key] == (None if row["abstained"] else plain[key])
    for bad in (0, 1, 1.5, -0.1, "0.5", True):
        with pytest.raises(LongbertError, match=r"^min_confidence must be a number in \(0, 1\), got "):
            model.predict(TEXTS, min_confidence=bad)


def test_predict_cli_abstains_and_says_how_many(folders, tmp_path):
    model = load(folders)
    minimum = between([max(r["probabilities"].values()) for r in model.predict(TEXTS, precision="fp32")])
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    result = runner.invoke(app, ["predict", str(folders[0] / "single"), str(source), "-o", str(tmp_path / "o.jsonl"),
                                 "--precision", "fp32", "--min-confidence", str(minimum), "--explain", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [r["abstained"] for r in rows].count(True) == 2
    assert all(r["label"] is None for r in rows if r["abstained"]) and all("units" in r for r in rows)
    assert f"2 of 4 documents abstained (confidence below --min-confidence {minimum:g})" in result.output
    page = (tmp_path / "explain.html").read_text()
    assert "abstained below --min-confidence (what follows is for its likeliest answer)" in page
    assert len(re.findall(r"for its likeliest answer\): \w+ \(p = 0\.\d\d\)", page)) == 2  # the class it would give
    for bad in ("0", "1", "2.5"):
        result = runner.invoke(app, ["predict", str(folders[0] / "single"), str(source), "--min-confidence", bad])
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1, result.output
        assert lines[0].startswith("error: --min-confidence must be a number in (0, 1), got "), lines[0]


def test_serve_abstains_at_the_servers_or_the_requests_minimum(folders):
    predictor, _ = load_predictor(folders[0] / "single", "fp32")
    sure = [max(p) for p in expected(folders)]
    low, high = min(sure) - 1e-3, between(sure)
    with TestClient(build_app(predictor, precision="fp32", min_confidence=high)) as client:
        server_wide = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
        asked = client.post("/predict", json={"texts": TEXTS, "min_confidence": low}).json()["predictions"]
        one = client.post("/predict", json={"text": TEXTS[0], "min_confidence": 0.999999}).json()
        refused = client.post("/predict", json={"text": TEXTS[0], "min_confidence": 0})
    assert [r["abstained"] for r in server_wide] == [s < high for s in sure]
    assert not any(r["abstained"] for r in asked) and all(r["label"] for r in asked)
    assert one["abstained"] is True and one["label"] is None and one["probabilities"]
    assert refused.status_code == 422
    assert refused.json() == {"error": '"min_confidence" must be a number in (0, 1), got 0'}
    with pytest.raises(LongbertError, match=r"min_confidence must be a number in \(0, 1\), got 2"):
        build_app(predictor, min_confidence=2)
    result = runner.invoke(app, ["serve", str(folders[0] / "single"), "--min-confidence", "1"])
    assert result.exit_code == 2 and "error: --min-confidence must be a number in (0, 1), got 1.0" in result.output
