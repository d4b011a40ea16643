"""`longbert export` and the onnxruntime runtime of exported folders: the graphs give what the PyTorch model gives
in fp32 on documents of any length (one window, many windows, a batch of both), int8 stays close, parity.json says
so on the run's own test texts, window strategies only, and every user error is one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from helpers import assert_user_error, build_model, random_documents
from longbert.cli import app
from longbert.errors import LongbertError

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")

import longbert
from longbert.config import load_recipe
from longbert.inference.export import WindowEncoder, check_exportable, export_model, exportable_strategies  # noqa: E402
from longbert.inference.exported import ExportedClassifier  # noqa: E402
from longbert.inference.serve import build_app, load_predictor
from longbert.modeling.classifier import LongDocumentClassifier  # noqa: E402
from longbert.strategies.base import PassBudget, SpecialTokens
from longbert.strategies.registry import build_strategy
from longbert.strategies.windows import build_pass

pytestmark = pytest.mark.heavy  # trains, resumes or exports models: left out of the 1-minute subset

runner = CliRunner()
TEXTS = ["Short.", "A film about a long train journey, and rather too long itself. " * 40,
         "Fine acting, weak plot; I would not watch it twice. " * 6]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def fp32_logits(model, documents):
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return model(documents).logits


@pytest.fixture(scope="module")
def tiny_run(tiny_backbone_dir, imdb_slice, tmp_path_factory):
    """A run folder: a tiny chunk model (max pooling: its unit count must stay dynamic in the graph), a few steps
    on the IMDb slice, exported by the CLI with int8 and parity on 6 of the run's test texts."""
    folder = tmp_path_factory.mktemp("export") / "run"
    recipe = longbert.load_recipe(None, [
        f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
        "data.validation_fraction=0.25", "data.max_document_tokens=400", "strategy.name=chunk", "strategy.window=40",
        "strategy.pooling=max", "train.max_steps=4", "train.batch_size=8", "train.mixed_precision=no",
        f"output_dir={folder}"])
    longbert.train(recipe)
    result = run("export", folder, "--quantize", "int8", "--parity-documents", 6)
    assert result.exit_code == 0, result.output
    assert f"exported to {folder / 'onnx'}" in result.output
    assert "6 texts" in result.output and "int8 labels agree" in result.output
    return folder


def test_the_export_folder_and_its_parity(tiny_run):
    folder = tiny_run / "onnx"
    assert {p.name for p in folder.iterdir()} >= {"export.json", "encoder.onnx", "encoder.int8.onnx", "head.onnx",
                                                   "parity.json", "tokenizer.json"}
    parity = json.loads((folder / "parity.json").read_text())
    # Half of them longer than 512 tokens where there are enough: the slice's test split has 2, both are taken.
    assert parity["texts"] == 6 and parity["long_texts"] == 2
    assert "test split" in parity["source"]
    assert parity["onnx_fp32"]["label_agreement"] == 1.0
    assert parity["onnx_fp32"]["max_abs_probability_difference"] < 1e-5
    assert parity["onnx_int8"]["max_abs_probability_difference"] < 0.05


def test_the_graphs_keep_batch_sequence_and_unit_axes_dynamic(tiny_run):
    import onnx

    def dims(path, name):
        graph = onnx.load(str(path), load_external_data=False).graph
        (value,) = [v for v in graph.input if v.name == name]
        return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]

    folder = tiny_run / "onnx"
    assert all(isinstance(d, str) for d in dims(folder / "encoder.onnx", "input_ids"))  # (W, L) symbolic
    assert all(isinstance(d, str) for d in dims(folder / "encoder.onnx", "attention_mask"))
    vectors = dims(folder / "head.onnx", "vectors")
    assert isinstance(vectors[0], str) and isinstance(vectors[1], str) and vectors[2] == 32  # (B, N, H)


@pytest.mark.parametrize("lengths", [[1], [39], [40, 41], [5, 400, 1000, 81]], ids=["one-token", "one-window",
                                                                                      "edge", "mixed"])
def test_the_runtime_equals_pytorch_fp32_at_any_length(tiny_run, lengths):
    model = LongDocumentClassifier.from_pretrained(tiny_run)
    runtime = ExportedClassifier(tiny_run / "onnx", "fp32")
    documents = random_documents(lengths)  # windows of 40: up to 25 per document, past the backbone's 128 positions
    torch.testing.assert_close(runtime.logits(documents), fp32_logits(model, documents), atol=1e-5, rtol=1e-4)
    int8 = ExportedClassifier(tiny_run / "onnx", "int8")
    reference = model.probabilities(fp32_logits(model, documents))
    assert (int8.probabilities(int8.logits(documents)) - reference).abs().max() < 0.05


def test_runtime_predict_gives_predicts_rows(tiny_run):
    model = LongDocumentClassifier.from_pretrained(tiny_run)
    runtime = ExportedClassifier(tiny_run / "onnx")
    assert runtime.precision == "int8"  # the quantized encoder is the default when there is one
    fp32 = ExportedClassifier(tiny_run / "onnx", "fp32")
    got, expected = fp32.predict(TEXTS, batch_size=2), model.predict(TEXTS)
    assert [r["n_tokens"] for r in got] == [r["n_tokens"] for r in expected]
    assert [set(r) for r in got] == [set(r) for r in expected]
    for a, b in zip(got, expected):  # model.predict runs under bf16 autocast on a bf16 CPU: close, not equal
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=2e-2)
    with pytest.raises(LongbertError, match="text 1 is empty or whitespace-only"):
        runtime.predict(["fine", " "])
    with pytest.raises(LongbertError, match=r"^texts must be a list of strings, got one str \('great'\); pass"):
        runtime.predict("great")  # read whole, not one character a text
    for given, kind in ((None, "NoneType"), (5, "int")):
        with pytest.raises(LongbertError, match=f"^text 1 is a {kind} \\({given}\\), not a string$"):
            model.predict(["fine", given])


def test_a_tampered_temperature_in_export_json_is_refused(tiny_run, tmp_path):
    folder = tmp_path / "onnx"
    shutil.copytree(tiny_run / "onnx", folder)
    info = json.loads((folder / "export.json").read_text())
    info["settings"]["temperatures"] = [1e8]  # every probability 0.5, every label the first
    (folder / "export.json").write_text(json.dumps(info))
    with pytest.raises(LongbertError, match=r"export.json \(settings\).*temperatures must hold 1 number\(s\) "
                                            r"between 0.04979 and 20.09.*got \[100000000.0\]"):
        ExportedClassifier(folder)


@pytest.mark.parametrize("name", ["tokenizer_config.json", "tokenizer.json"])
def test_an_exported_folder_without_its_tokenizer_files_is_named_in_one_line(tiny_run, tmp_path, name):
    folder = tmp_path / "onnx"
    shutil.copytree(tiny_run / "onnx", folder)
    (folder / name).unlink()
    with pytest.raises(LongbertError, match=rf"^{re.escape(str(folder))} is incomplete: no {re.escape(name)}$"):
        ExportedClassifier(folder)


@pytest.mark.parametrize("strategy, extra", [
    ("truncate", ["strategy.token_pooling=mean", "strategy.mode=head_tail"]),
    ("sliding", ["strategy.pooling=transformer", "model.finetune=lora"]),
], ids=["truncate-mean-tokens", "sliding-transformer-lora"])
def test_every_window_strategy_exports(tiny_backbone_dir, tmp_path, strategy, extra):
    model = build_model(tiny_backbone_dir, strategy, extra)
    model.save_pretrained(tmp_path / "model")
    if strategy == "truncate":  # a saved model, not a run folder: no data of its own to check parity on
        result = run("export", tmp_path / "model", "-o", tmp_path / "out")
        assert result.exit_code == 0, result.output
        assert "is not a run folder (no recipe.yaml); give some with --parity-texts" in result.output
        assert json.loads((tmp_path / "out" / "parity.json").read_text())["texts"] == 0
    else:
        parity = export_model(tmp_path / "model", tmp_path / "out", parity_texts=TEXTS).parity
        assert parity["onnx_fp32"]["label_agreement"] == 1.0 and "onnx_int8" not in parity
        assert parity["source"] == "the texts given"
    runtime = ExportedClassifier(tmp_path / "out")
    assert runtime.precision == "fp32"
    documents = random_documents([3, 130, 700])
    torch.testing.assert_close(runtime.logits(documents), fp32_logits(model, documents), atol=1e-5, rtol=1e-4)


def test_the_windows_hook_cuts_what_unit_spans_describe():
    for name in exportable_strategies():
        config = load_recipe(None, [f"strategy.name={name}", "strategy.window=40", "strategy.stride=15"]
                             if name == "sliding" else [f"strategy.name={name}"]).strategy
        strategy = build_strategy(config, 8, SpecialTokens(101, 102, 0), PassBudget())
        for length in (0, 1, 40, 41, 1000):
            ids = torch.arange(length)
            windows, sizes = strategy.windows(ids)
            described = [[i for a, b in unit for i in range(a, b)] for unit in strategy.unit_spans(length)]
            assert [w.tolist() for w in windows] == described, (name, length)
            if sizes is not None:  # mean pooling by new tokens: every token counted once (an empty document: once)
                assert len(sizes) == len(windows) and sum(sizes) == max(length, 1), (name, length)


@pytest.mark.parametrize("token_pooling", ["cls", "mean"])
def test_the_encoder_graph_is_the_backbone_then_the_strategys_window_vectors(tiny_backbone_dir, token_pooling):
    model = build_model(tiny_backbone_dir, "sliding", [f"strategy.token_pooling={token_pooling}",
                                                       "strategy.pooling=attention"])
    document = random_documents([90])[0]
    windows, _ = model.strategy.windows(document)
    input_ids, attention_mask = build_pass(windows, SpecialTokens.from_tokenizer(model.tokenizer), "cpu")  # (W, L)
    encoder = WindowEncoder(model.backbone, model.strategy)
    # The pooler's weights belong to the head graph: the encoder graph holds the backbone's only.
    assert {n for n, _ in encoder.named_parameters()} == {f"backbone.{n}" for n, _ in model.backbone.named_parameters()}
    with torch.no_grad():
        torch.testing.assert_close(encoder(input_ids, attention_mask), model.encode([document]).vectors[0])


@pytest.mark.parametrize("strategy", ["bigbird", "recurrence", "rmt"])
def test_strategies_that_read_the_whole_document_are_refused(tiny_backbone_dir, strategy):
    model = build_model(tiny_backbone_dir, strategy)
    with pytest.raises(LongbertError, match=rf"strategy {strategy} cannot be exported: it does not read a document as "
                                            r"independent windows .*; export supports chunk, sliding, truncate$"):
        check_exportable(model.strategy, strategy)


def test_user_errors_are_one_line(tiny_backbone_dir, tiny_run, tmp_path):
    model_dir = tmp_path / "rmt"
    build_model(tiny_backbone_dir, "rmt").save_pretrained(model_dir)
    assert_user_error(run("export", model_dir, "--output", tmp_path / "x"), "strategy rmt cannot be exported")
    assert not (tmp_path / "x").exists()
    assert_user_error(run("export", tiny_run, "--format", "tflite"), "--format must be one of onnx, got 'tflite'")
    assert_user_error(run("export", tiny_run, "--quantize", "int4"), "--quantize must be one of int8, got 'int4'")
    assert_user_error(run("export", tiny_run),
                      f"--output {tiny_run / 'onnx'} already exists; remove it or name another")
    assert_user_error(run("export", tiny_run, "-o", tmp_path / "missing" / "out"), "the folder", "does not exist")
    assert_user_error(run("export", tmp_path / "nothing", "-o", tmp_path / "y"), "is not a longbert model folder")
    with pytest.raises(LongbertError, match="is not a longbert export folder \\(no export.json\\)"):
        ExportedClassifier(tiny_run)
    # an exported folder that lost export.json is named as one (once: "no longbert_config.json", the wrong file)
    lost = tmp_path / "lost"
    lost.mkdir()
    (lost / "encoder.onnx").write_bytes((tiny_run / "onnx" / "encoder.onnx").read_bytes())
    (lost / "in.txt").write_text("a text\n")
    assert_user_error(run("predict", lost, lost / "in.txt"), "holds encoder.onnx but no export.json")


@pytest.mark.parametrize("missing", ["onnxruntime", "onnxscript"])
def test_a_missing_extra_is_one_line(tiny_run, tmp_path, monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # `import missing` now fails
    assert_user_error(run("export", tiny_run, "-o", tmp_path / "out"),
                      f"longbert export needs {missing}, which is not installed: pip install 'longbert[export]'")
    with pytest.raises(LongbertError, match=r"pip install 'longbert\[export\]'"):
        ExportedClassifier(tiny_run / "onnx")


def test_serving_an_exported_folder(tiny_run):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    predictor, backend = load_predictor(tiny_run / "onnx")
    assert backend == "onnx-int8"
    with TestClient(build_app(predictor, backend=backend)) as client:
        assert client.get("/health").json()["backend"] == "onnx-int8"
        got = client.post("/predict", json={"texts": TEXTS}).json()["predictions"]
    expected = predictor.predict(TEXTS)
    assert [r["label"] for r in got] == [r["label"] for r in expected]
    for a, b in zip(got, expected):
        assert a["probabilities"] == pytest.approx(b["probabilities"], abs=1e-6)


@pytest.mark.parametrize("name, damage", [("encoder.int8.onnx", "garbage"), ("head.onnx", "garbage"),
                                          ("encoder.onnx", "cut in half"), ("head.onnx", "another graph")])
def test_a_damaged_graph_is_named_in_one_line(tiny_run, tmp_path, name, damage):
    folder = tmp_path / "onnx"
    shutil.copytree(tiny_run / "onnx", folder)
    path = folder / name
    if damage == "garbage":
        path.write_bytes(b"\x00not a graph\xff" * 64)
    elif damage == "cut in half":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        shutil.copy(folder / "encoder.onnx", path)
    precision = "fp32" if name == "encoder.onnx" else None
    with pytest.raises(LongbertError, match=rf"^{re.escape(str(path))} is damaged: "):
        ExportedClassifier(folder, precision)
    if precision is None:  # what `serve` opens: the int8 encoder and the head
        pytest.importorskip("uvicorn")
        assert_user_error(run("serve", folder, "--port", 0), f"{path} is damaged")


def test_an_unwritable_or_taken_output_is_one_line_before_the_work(tiny_run, tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "taken").write_text("")
    assert_user_error(run("export", tiny_run, "-o", tmp_path / "taken"), "is a file; export writes a folder")
    assert_user_error(run("export", tiny_run, "-o", "/proc/x"), "cannot write into --output's folder /proc")


@pytest.mark.parametrize("output", ["", ".", ".."])
def test_an_output_that_names_no_folder_is_one_line_before_the_work(tmp_path, monkeypatch, output):
    monkeypatch.chdir(tmp_path)  # tmp_path is no model either: the output is checked first
    shown = "." if output == "" else output  # typer reads '' as the path '.'
    assert_user_error(run("export", tmp_path, "-o", output), f"--output '{shown}' names no folder of its own")
    assert list(tmp_path.iterdir()) == []


def test_a_staging_folder_left_by_a_killed_export_is_swept(tiny_run, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f".out.staging-{dead.pid}-k9x2"  # what kill -9 during an export leaves
    left.mkdir()
    (left / "encoder.onnx").write_bytes(b"half a graph")
    working = tmp_path / f".out.staging-{os.getpid()}-live"  # a writer still at work keeps its own
    working.mkdir()
    export_model(tiny_run, tmp_path / "out", parity_documents=0)
    assert not left.exists() and working.exists()
    assert (tmp_path / "out" / "export.json").is_file()


def test_predict_runs_an_exported_folder_in_onnxruntime(tiny_run, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n")
    for precision in ("fp32", "int8"):  # the folder's int8 encoder is its default; a copy with only fp32 runs fp32
        folder = tiny_run / "onnx"
        if precision == "fp32":
            folder = tmp_path / "fp32-only"
            shutil.copytree(tiny_run / "onnx", folder)
            (folder / "encoder.int8.onnx").unlink()
            info = json.loads((folder / "export.json").read_text())
            del info["encoders"]["int8"]
            (folder / "export.json").write_text(json.dumps(info))
        result = run("predict", folder, source, "-o", tmp_path / f"{precision}.jsonl", "--batch-size", 2)
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in (tmp_path / f"{precision}.jsonl").read_text().splitlines()]
        expected = ExportedClassifier(folder).predict(TEXTS)
        assert [r["id"] for r in rows] == [0, 1, 2]  # input order, though batches run longest first
        for row, want in zip(rows, expected):
            assert row["label"] == want["label"] and row["n_tokens"] == want["n_tokens"]
            assert row["probabilities"] == pytest.approx(want["probabilities"], abs=1e-6)
    exact = LongDocumentClassifier.from_pretrained(tiny_run).predict(TEXTS, precision="fp32")
    fp32_rows = [json.loads(line) for line in (tmp_path / "fp32.jsonl").read_text().splitlines()]
    for row, want in zip(fp32_rows, exact):
        assert row["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)


def test_predict_on_an_exported_folder_refuses_precision_and_explain_in_one_line(tiny_run, tmp_path):
    source = tmp_path / "texts.txt"
    source.write_text("a text\n")
    assert_user_error(run("predict", tiny_run / "onnx", source, "--precision", "int8"),
                      "is an exported folder: it runs at the precision it was exported with")
    assert_user_error(run("predict", tiny_run / "onnx", source, "--explain", tmp_path / "page.html"),
                      "--explain needs a PyTorch model folder", "is an exported folder")
    assert not (tmp_path / "page.html").exists()
