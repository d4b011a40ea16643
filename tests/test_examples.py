"""The examples a user copies (examples/*.py) do what they print: each runs in-process, as `python examples/NAME.py`
would, on a tiny random-weight BERT and made-up documents in tmp_path (nothing from the hub), and the test reads what
it printed and wrote."""
import re
import runpy
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import build_model
from longbert.config import load_recipe
from longbert.modeling.classifier import LongDocumentClassifier

pytestmark = pytest.mark.heavy  # trains, saves and serves models

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# "pos  (neg 0.498, pos 0.502)  431 tokens: ..." -> label, scores, tokens
ROW = re.compile(r"^(\S+)  \((.+)\)  (\d+) tokens: ")


def run_example(name: str, args, monkeypatch) -> dict:
    """Run examples/`name` with `args` as its command line; its globals when it ends."""
    monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *map(str, args)])
    return runpy.run_path(str(EXAMPLES / name), run_name="__main__")


def printed_rows(lines: list[str]) -> list[tuple[str, dict[str, float], int]]:
    """The prediction lines an example printed: (label, {label: score}, tokens)."""
    rows = []
    for line in lines:
        if match := ROW.match(line):
            scores = dict((name, float(p)) for name, p in (pair.split() for pair in match[2].split(", ")))
            rows.append((match[1], scores, int(match[3])))
    return rows


def assert_rows_match(rows, expected: list[dict], abs_tol: float = 2e-3) -> None:
    """Printed rows (rounded to 3 places) against `predict`'s rows for the same texts."""
    assert len(rows) == len(expected) > 0
    for (label, scores, tokens), want in zip(rows, expected):
        assert (label, tokens) == (want["label"], want["n_tokens"])
        assert scores == pytest.approx(want["probabilities"], abs=abs_tol)


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("examples") / "model"
    build_model(tiny_backbone_dir, "chunk").save_pretrained(folder)
    return folder


def test_train_and_predict_trains_on_lists_in_memory_and_predicts_new_texts(tiny_backbone_dir, tmp_path, monkeypatch,
                                                                            capsys):
    run = tmp_path / "run"
    settings = [f"backbone.name={tiny_backbone_dir}", "strategy.name=chunk", "strategy.window=62", "train.epochs=1",
                "train.head_first=false", "train.batch_size=8", "train.mixed_precision=no", "eval.batch_size=16"]
    args = ["--output", run, "--documents", 16, *(f"--set={setting}" for setting in settings)]
    ran = run_example("train_and_predict.py", args, monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    saved = load_recipe(run / "recipe.yaml").data.path
    assert saved == "in-memory dict of (texts, labels) pair by split (train: 16 rows, test: 4 rows)"
    assert (run / "best" / "config.json").is_file()
    accuracy = ran["result"].record.test["accuracy"]
    assert f"test accuracy: {accuracy:.3f} (run folder: {run})" in lines
    expected = LongDocumentClassifier.from_pretrained(run).predict(ran["new_texts"])
    assert_rows_match(printed_rows(lines), expected)
    assert min(r["n_tokens"] for r in expected) > 128, "longer than the tiny backbone reads at once"

    with pytest.raises(SystemExit, match=r"^error: run folder .* already holds a run"):
        run_example("train_and_predict.py", args, monkeypatch)


def test_pipeline_classifies_whole_documents_with_a_saved_model(model_dir, tmp_path, monkeypatch, capsys):
    import torch

    ran = run_example("pipeline.py", [model_dir], monkeypatch)
    rows = printed_rows(capsys.readouterr().out.splitlines())
    expected = LongDocumentClassifier.from_pretrained(model_dir).predict(ran["texts"])
    # Where CUDA is, the pipeline runs in bf16 (precision auto): a random model's scores near 0.5 may then swap labels.
    if torch.cuda.is_available():
        assert [scores for _, scores, _ in rows] == [pytest.approx(r["probabilities"], abs=2e-2) for r in expected]
    else:
        assert_rows_match(rows, expected)
    assert all(tokens > 128 for _, _, tokens in rows), "the pipeline does not truncate"

    monkeypatch.chdir(tmp_path)  # no runs/examples/train_and_predict here
    with pytest.raises(SystemExit, match=r"^error: .* run examples/train_and_predict.py first"):
        run_example("pipeline.py", [], monkeypatch)


def test_serve_client_gets_the_served_models_predictions(model_dir, monkeypatch, capsys):
    pytest.importorskip("fastapi")
    uvicorn = pytest.importorskip("uvicorn")
    from longbert.inference.serve import build_app, listen

    model = LongDocumentClassifier.from_pretrained(model_dir)
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(build_app(model, name="tiny"), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        ran = run_example("serve_client.py", ["--url", f"http://127.0.0.1:{sock.getsockname()[1]}"], monkeypatch)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "server: tiny (pytorch), labels neg, pos"
    assert_rows_match(printed_rows(lines), model.predict(ran["texts"]), abs_tol=2e-3)

    with socket.socket() as free:  # a port that nothing listens on
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(SystemExit, match=rf"^error: no server at http://127.0.0.1:{port}/health"):
        run_example("serve_client.py", ["--url", f"http://127.0.0.1:{port}"], monkeypatch)


def test_embeddings_gives_one_vector_a_document_and_uses_them(tiny_backbone_dir, model_dir, monkeypatch, capsys):
    ran = run_example("embeddings.py", [f"--set=backbone.name={tiny_backbone_dir}", "--set=strategy.window=62"],
                      monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    assert ran["vectors"].shape == (12, 32) and lines[0] == "12 documents -> vectors of 32"
    neighbours = [float(line.split()[0]) for line in lines[2:5]]
    assert lines[1].startswith("nearest to ") and neighbours == sorted(neighbours, reverse=True)
    assert all(-1.0 <= s <= 1.0 for s in neighbours)
    accuracy = re.fullmatch(r"topic classifier on the vectors: (\S+) accuracy \(4-fold cross-validation\)", lines[5])
    assert accuracy and 0.0 <= float(accuracy[1]) <= 1.0

    # A saved model's vectors are its own: what `model.embed` (and `longbert embed`) gives.
    ran = run_example("embeddings.py", ["--model", model_dir], monkeypatch)
    expected = LongDocumentClassifier.from_pretrained(model_dir).embed(ran["texts"]).numpy()
    assert ran["vectors"] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(SystemExit, match=r"^error: .*not a longbert model folder"):
        run_example("embeddings.py", ["--model", model_dir.parent], monkeypatch)
