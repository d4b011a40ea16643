"""Document embeddings: the vector `embed` gives is the one the head reads (its head gives predict's probabilities),
the same whatever the batch, for every strategy; `longbert embed` writes it as .npy (numpy) or .jsonl in input order,
and refuses an output it cannot write in one line before the model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from helpers import build_model
from longbert.cli import app
from longbert.modeling.classifier import LongDocumentClassifier

TEXTS = ["A fine film. " * 3, "Awful, dull and long. " * 90, "It was fine I suppose. " * 40, "Good."]
runner = CliRunner()


@pytest.mark.parametrize("strategy", ["truncate", "chunk", "sliding", "bigbird", "recurrence"])
def test_the_head_of_the_embedding_gives_predicts_probabilities(tiny_backbone_dir, strategy):
    pooling = [] if strategy in ("truncate", "bigbird") else ["strategy.pooling=attention"]
    model = build_model(tiny_backbone_dir, strategy, pooling)
    vectors = model.embed(TEXTS, batch_size=2, precision="fp32")
    assert vectors.shape == (len(TEXTS), model.head.in_features) and vectors.dtype == torch.float32
    probabilities = model.probabilities(model.head(vectors))
    expected = [list(r["probabilities"].values()) for r in model.predict(TEXTS, batch_size=2, precision="fp32")]
    assert torch.allclose(probabilities, torch.tensor(expected), atol=1e-5)
    one_by_one = torch.cat([model.embed([t], batch_size=1, precision="fp32") for t in TEXTS])
    assert torch.allclose(vectors, one_by_one, atol=1e-5)  # a document's vector does not depend on its batch


@pytest.fixture(scope="module")
def model_dir(tiny_backbone_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("embed") / "saved"
    build_model(tiny_backbone_dir, "chunk").save_pretrained(folder)
    return folder


def test_embed_writes_npy_and_jsonl_in_input_order(model_dir, tmp_path):
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t, "name": f"doc{i}"}) + "\n"
                                               for i, t in enumerate(TEXTS)))
    expected = LongDocumentClassifier.from_pretrained(model_dir).embed(TEXTS, precision="fp32")
    result = runner.invoke(app, ["embed", str(model_dir), str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "v.npy"),
                                 "--precision", "fp32", "--batch-size", "3"])
    assert result.exit_code == 0, result.output
    vectors = np.load(tmp_path / "v.npy")
    assert vectors.shape == tuple(expected.shape) and vectors.dtype == np.float32
    assert np.allclose(vectors, expected.numpy(), atol=1e-5)
    result = runner.invoke(app, ["embed", str(model_dir), str(tmp_path / "in.jsonl"), "-o",
                                 str(tmp_path / "v.jsonl"), "--precision", "fp32", "--id-column", "name"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"doc{i}" for i in range(len(TEXTS))]
    assert np.allclose(np.array([r["embedding"] for r in rows]), expected.numpy(), atol=1e-5)


@pytest.mark.parametrize("output, fragment", [("v.csv", "name a .npy file (numpy) or a .jsonl file"),
                                              ("missing/v.npy", "does not exist")])
def test_an_output_embed_cannot_write_is_one_line_before_the_model_loads(tmp_path, monkeypatch, output, fragment):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the output was checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.txt").write_text("a text\n")
    result = runner.invoke(app, ["embed", str(tmp_path), str(tmp_path / "in.txt"), "-o", str(tmp_path / output)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith("error: --output") and fragment in result.output
    assert not list(tmp_path.glob("v.*"))


def test_keep_with_a_npy_output_and_a_zero_batch_size_are_one_line_before_the_model_loads(tmp_path, monkeypatch):
    def no_loading(directory):
        raise AssertionError("the model was loaded before the options were checked")

    monkeypatch.setattr(LongDocumentClassifier, "from_pretrained", no_loading)
    (tmp_path / "in.jsonl").write_text('{"text": "a text", "title": "t"}\n')
    for options, fragment in ((["-o", str(tmp_path / "v.npy"), "--keep", "title"], "a .npy file holds the vectors"),
                              (["-o", str(tmp_path / "v.npy"), "--batch-size", "0"], "--batch-size must be >= 1")):
        result = runner.invoke(app, ["embed", str(tmp_path), str(tmp_path / "in.jsonl"), *options])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert fragment in result.output and not (tmp_path / "v.npy").exists()
