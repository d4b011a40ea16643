"""`--runtime openvino`: the backbone's passes in OpenVINO give what the PyTorch model gives in fp32, on documents of
any length and every window strategy (LoRA merged); bf16 stays close; the pooling, head and calibration are the
model's own; what it cannot run (bigbird, recurrence, an ensemble, int8, --explain, an exported folder) is one line;
and `predict` and `serve` take the option."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from typer.testing import CliRunner

from helpers import assert_user_error, build_model, random_documents
from longbert.cli import app
from longbert.errors import LongbertError

pytest.importorskip("openvino", reason="the openvino extra is not installed (pip install 'longbert[openvino]')")

from longbert.inference.openvino_runtime import OpenVINOModel, openvino_precision  # noqa: E402
from longbert.utils.hardware import fast_bf16  # noqa: E402

pytestmark = pytest.mark.heavy  # converts and compiles models: left out of the 1-minute subset

runner = CliRunner()
TEXTS = ["Short.", "A film about a long train journey, and rather too long itself. " * 40,
         "Fine acting, weak plot; I would not watch it twice. " * 6]


def fp32_logits(model, documents):
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return model(documents).logits


@pytest.mark.parametrize("strategy, extra", [
    ("chunk", ["strategy.pooling=attention"]),
    ("truncate", ["strategy.token_pooling=mean", "strategy.mode=head_tail"]),
    ("sliding", ["strategy.pooling=transformer", "model.finetune=lora"]),
], ids=["chunk-attention", "truncate-mean-tokens", "sliding-transformer-lora"])
def test_openvino_fp32_reads_as_the_pytorch_model_does(tiny_backbone_dir, strategy, extra):
    model = build_model(tiny_backbone_dir, strategy, extra)
    with torch.no_grad():  # LoRA's B matrices start at zero: move them, so that merging them is tested
        for name, parameter in model.backbone.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    runtime = OpenVINOModel(model, "fp32")
    assert runtime.precision == "fp32"
    # One window, many windows, and a batch of both (passes of several shapes through one compiled graph).
    for lengths in ([3], [700], [3, 130, 700, 41]):
        documents = random_documents(lengths)
        torch.testing.assert_close(runtime(documents).logits, fp32_logits(model, documents), atol=1e-5, rtol=1e-4)
    want = model.predict(TEXTS, precision="fp32")
    got = runtime.predict(TEXTS)
    assert [r["label"] for r in got] == [r["label"] for r in want]
    assert [r["n_tokens"] for r in got] == [r["n_tokens"] for r in want]
    for a, b in zip(got, want):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    vectors = runtime.embed(TEXTS)
    torch.testing.assert_close(vectors, model.embed(TEXTS, precision="fp32"), atol=1e-5, rtol=1e-4)


def test_bf16_stays_close_and_calibration_is_the_models(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    model.settings.temperatures = [0.25]  # calibrated: the runtime must answer through the model's temperature
    runtime = OpenVINOModel(model, "bf16")
    documents = random_documents([5, 300, 260])
    got = runtime.probabilities(runtime(documents).logits)
    want = model.probabilities(fp32_logits(model, documents))
    assert (got - want).abs().max() < 0.01
    uncalibrated = torch.softmax(fp32_logits(model, documents), -1)
    assert (want - uncalibrated).abs().max() > 0.05  # the temperature moves them more than bf16 does


def test_auto_picks_what_the_cpu_runs_fast_and_refuses_other_precisions():
    assert openvino_precision("auto") == ("bf16" if fast_bf16("cpu") else "fp32")
    with pytest.raises(LongbertError, match=r"runs at fp32, bf16 or auto, not 'int8'"):
        openvino_precision("int8")


@pytest.mark.parametrize("strategy", ["bigbird", "recurrence"])
def test_strategies_that_are_not_independent_windows_are_refused(tiny_backbone_dir, strategy):
    model = build_model(tiny_backbone_dir, strategy)
    with pytest.raises(LongbertError, match=rf"strategy {strategy} cannot be exported: it does not read a document "
                                            "as independent windows"):
        OpenVINOModel(model)


def test_a_missing_extra_is_one_line(tiny_backbone_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` now fails
    with pytest.raises(LongbertError, match=r"--runtime openvino needs openvino, which is not installed: pip install "
                                            r"'longbert\[openvino\]'"):
        OpenVINOModel(build_model(tiny_backbone_dir, "chunk"))


def test_predict_and_serve_take_the_runtime(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk")
    model.save_pretrained(tmp_path / "model")
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    result = runner.invoke(app, ["predict", str(tmp_path / "model"), str(source), "-o", str(tmp_path / "rows.jsonl"),
                                 "--runtime", "openvino", "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    want = model.predict(TEXTS, precision="fp32")
    assert [r["label"] for r in rows] == [r["label"] for r in want]
    for a, b in zip(rows, want):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)
    assert "OpenVINO (fp32)" in result.output

    assert_user_error(runner.invoke(app, ["predict", str(tmp_path / "model"), str(source), "--runtime", "onnx"]),
                      "--runtime must be one of torch, openvino, got 'onnx'")
    assert_user_error(runner.invoke(app, ["predict", str(tmp_path / "model"), str(source), "--runtime", "openvino",
                                          "--precision", "int8"]), "--runtime openvino runs at fp32, bf16 or auto")
    assert_user_error(runner.invoke(app, ["predict", str(tmp_path / "model"), str(source), "--runtime", "openvino",
                                          "--explain", str(tmp_path / "page.html")]),
                      "--explain reads with --runtime torch")
    assert not (tmp_path / "page.html").exists()

    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from longbert.inference.serve import build_app, load_predictor

    predictor, backend = load_predictor(tmp_path / "model", "fp32", runtime="openvino")
    assert backend == "openvino-fp32"
    with TestClient(build_app(predictor, backend=backend)) as client:
        assert client.get("/health").json()["backend"] == "openvino-fp32"
        got = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
    for a, b in zip(got, want):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-5)


def test_an_ensemble_is_refused(tiny_backbone_dir):
    from types import SimpleNamespace

    model = build_model(tiny_backbone_dir, "chunk")
    model.ensemble = SimpleNamespace(facts=SimpleNamespace(members=["chunk", "sliding"]))  # what refusal reads
    with pytest.raises(LongbertError, match=r"this model is an ensemble of 2 models \(chunk, sliding\); --runtime "
                                            "openvino runs one network"):
        OpenVINOModel(model)


def test_an_exported_folder_is_refused_before_it_loads(tmp_path):
    from longbert.inference.openvino_runtime import check_export_runtime

    (tmp_path / "export.json").write_text("{}")  # what marks an exported folder; nothing is read before the refusal
    with pytest.raises(LongbertError, match=rf"{tmp_path} is an exported folder, which runs in onnxruntime; "
                                            "--runtime openvino reads a run folder or a saved model folder"):
        check_export_runtime(tmp_path, "auto", "openvino")
    assert not check_export_runtime(tmp_path / "elsewhere", "fp32", "openvino")  # not an exported folder: go on
