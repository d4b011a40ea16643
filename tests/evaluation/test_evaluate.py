"""What evaluation writes: metrics pages (with many classes, the top confusions as a table and the whole matrix
as a PNG heatmap) and one prediction row per document."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from longbert.errors import LongbertError
from longbert.evaluation.evaluate import evaluation_name, metrics_markdown, write_predictions
from longbert.evaluation.metrics import MANY_CLASSES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def synthetic_metrics(n_classes: int) -> tuple[dict, list[str]]:
    """A metrics dict as compute_metrics writes it, for n_classes classes of 10 documents each; class k sends
    k % 4 of its documents to class k + 1 (so 'class-03' -> 'class-04' is among the largest confusions)."""
    names = [f"class-{k:02d}" for k in range(n_classes)]
    matrix = np.zeros((n_classes, n_classes), dtype=int)
    for k in range(n_classes):
        wrong = k % 4
        matrix[k, k] = 10 - wrong
        matrix[k, (k + 1) % n_classes] = wrong
    metrics = {
        "documents": 10 * n_classes,
        "accuracy": float(np.trace(matrix) / matrix.sum()),
        "macro_f1": 0.8,
        "loss": 0.5,
        "per_class": {n: {"precision": 0.8, "recall": 0.8, "f1": 0.8, "support": 10} for n in names},
        "confusion_matrix": matrix.tolist(),
        "by_length": {"<=512": {"documents": 10 * n_classes, "accuracy": 0.8}},
    }
    return metrics, names


def test_twenty_classes_get_top_confusions_and_a_plot_instead_of_a_twenty_column_table(tmp_path):
    metrics, names = synthetic_metrics(20)
    plot = tmp_path / "confusion-matrix.png"
    page = metrics_markdown(metrics, names, "twenty: test", plot)

    assert "## Top confusions (20 classes" in page
    assert "| true | predicted | documents | share |" in page
    assert "| class-03 | class-04 | 3 | 30.0% |" in page
    table_rows = [line for line in page.splitlines() if line.startswith("| class-") and "| class-" in line[2:]]
    assert len(table_rows) == 10, "the ten largest confusions"
    assert max(line.count("|") for line in page.splitlines()) <= 6, "no 20-column table"
    assert "## Confusion matrix" not in page
    assert "![confusion matrix, rows: true, columns: predicted](confusion-matrix.png)" in page
    assert plot.read_bytes().startswith(PNG_MAGIC)
    assert [p.name for p in tmp_path.iterdir()] == ["confusion-matrix.png"], "no temporary file left"

    # Without a place for the plot the page still has the table, and nothing is written.
    assert "![" not in metrics_markdown(metrics, names, "twenty: test")


def test_few_classes_keep_the_whole_matrix_as_a_table_and_write_no_plot(tmp_path):
    metrics, names = synthetic_metrics(MANY_CLASSES)
    page = metrics_markdown(metrics, names, "six: test", tmp_path / "confusion-matrix.png")
    assert "## Confusion matrix (rows: true, columns: predicted)" in page
    assert "| | " + " | ".join(names) + " |" in page
    assert "Top confusions" not in page
    assert not any(tmp_path.iterdir())


def test_multi_label_pages_have_no_matrix_and_no_plot(tmp_path):
    metrics, names = synthetic_metrics(8)
    metrics["confusion_matrix"] = [[[5, 1], [2, 2]] for _ in names]  # one 2x2 matrix per class
    page = metrics_markdown(metrics, names, "tags: test", tmp_path / "confusion-matrix.png")
    assert "Confusion matrix" not in page and "Top confusions" not in page
    assert not any(tmp_path.iterdir())


def test_prediction_rows_carry_ids_and_label_names(tmp_path):
    from datasets import Dataset

    raw = {"probabilities": np.array([[0.2, 0.8], [0.9, 0.1]]), "labels": np.array([1, 1]), "unit_weights": []}
    with_ids = Dataset.from_dict({"id": ["doc-7", "doc-9"], "n_tokens": [10, 20]})
    write_predictions(tmp_path / "p.jsonl", with_ids, raw, ["neg", "pos"], multi_label=False)
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["doc-7", "doc-9"]
    assert [(r["label_name"], r["predicted_label"]) for r in rows] == [("pos", "pos"), ("pos", "neg")]

    multi = {"probabilities": np.array([[0.6, 0.4], [0.2, 0.3]]), "labels": np.array([[1, 1], [0, 0]]),
             "unit_weights": []}
    write_predictions(tmp_path / "m.jsonl", Dataset.from_dict({"n_tokens": [10, 20]}), multi, ["a", "b"], True,
                      [0.5, 0.35])
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [0, 1], "no id column: the row index"
    assert rows[0]["predicted_label"] == ["a", "b"] and rows[0]["label_name"] == ["a", "b"]
    assert rows[1]["predicted_label"] == [] and rows[1]["predicted"] == [0, 0]


def test_an_evaluation_of_other_documents_is_named_beside_the_runs_own():
    assert evaluation_name("validation") == "validation"
    assert evaluation_name("test", ["eval.batch_size=2"]) == "test", "the same documents: the run's own files"
    assert evaluation_name("validation", ["eval.batch_size=2", "data.max_eval_documents=20"]) == (
        "validation-with-overrides")
    # with the calibration off it is another model's answer: never in place of the kept model's own files
    assert evaluation_name("test", calibrated=False) == "test-uncalibrated"
    assert evaluation_name("test", ["data.max_eval_documents=20"], False) == "test-with-overrides-uncalibrated"


# -- evaluate(model, documents) -------------------------------------------------------------------------------------

def documents(n: int = 6) -> tuple[list[str], list[str]]:
    words = {"neg": "dull flat tedious", "pos": "bright warm moving"}
    labels = ["neg", "pos"] * (n // 2)
    return [f"{words[label]} the film ran long {i}" for i, label in enumerate(labels)], labels


def test_a_model_is_evaluated_on_documents_in_memory_and_writes_nothing(tiny_backbone_dir, tmp_path, monkeypatch):
    import longbert
    from helpers import build_model

    monkeypatch.chdir(tmp_path)
    model = build_model(tiny_backbone_dir, "chunk")
    texts, labels = documents()
    metrics = longbert.evaluate(model, (texts, labels), precision="fp32")
    assert metrics["documents"] == 6 and set(metrics["per_class"]) == {"neg", "pos"}
    assert metrics["precision"] == "fp32" and 0 <= metrics["accuracy"] <= 1
    assert list(tmp_path.iterdir()) == [], "nothing written"
    # The same documents as rows, as a DataFrame-like dict of columns, and as data=: the same metrics.
    as_rows = [{"text": t, "label": label} for t, label in zip(texts, labels)]
    measured = lambda m: {k: v for k, v in m.items() if k != "speed"}
    assert measured(longbert.evaluate(model, as_rows, precision="fp32")) == measured(metrics)
    assert measured(longbert.evaluate(model, data={"text": texts, "label": labels}, precision="fp32")) == measured(
        metrics)
    # A saved model folder and a data file: the same metrics again.
    model.save_pretrained(tmp_path / "model")
    file = tmp_path / "documents.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for row in as_rows))
    assert longbert.evaluate(tmp_path / "model", file, precision="fp32")["accuracy"] == metrics["accuracy"]
    # Asked to, it writes the evaluation's files into a folder of its own.
    longbert.evaluate(model, file, precision="fp32", output=tmp_path / "evaluation")
    written = sorted(p.name for p in (tmp_path / "evaluation").iterdir() if p.name != ".longbert-written")
    assert written == ["metrics-documents.json", "metrics-documents.md", "predictions-documents.jsonl"]
    page = (tmp_path / "evaluation" / "metrics-documents.md").read_text()
    assert f"No reliability diagram: {len(labels)} documents are too few to fill its bins" in page
    lines = (tmp_path / "evaluation" / "predictions-documents.jsonl").read_text().splitlines()
    assert [json.loads(line)["label_name"] for line in lines] == labels
    # Written as every output folder is: a folder of a user's files is refused before any work; an earlier
    # evaluation's folder is replaced, its own files only.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "predictions-documents.jsonl").write_text("my own")
    with pytest.raises(LongbertError, match=r"^output .*mine already holds files this command did not write \(it "
                                            r"has no metrics-documents.json\); name a new or empty folder$"):
        longbert.evaluate(model, file, precision="fp32", output=tmp_path / "mine")
    assert (tmp_path / "mine" / "predictions-documents.jsonl").read_text() == "my own"
    (tmp_path / "evaluation" / "notes.txt").write_text("mine")
    longbert.evaluate(model, file, precision="fp32", output=tmp_path / "evaluation")
    assert (tmp_path / "evaluation" / "notes.txt").read_text() == "mine"
    again = sorted(p.name for p in (tmp_path / "evaluation").iterdir())
    assert again == sorted([".longbert-written", *written, "notes.txt"])


@pytest.mark.parametrize("call, expected", [
    (lambda m, d: m(), r"^evaluate: no documents to evaluate the model on; give them: evaluate\(model, documents\)$"),
    (lambda m, d: m(d, data=d), r"^evaluate: the documents are given twice \(second, and as data=\); give them once$"),
    (lambda m, d: m(d, overrides=["data.max_eval_documents=2"]), r"^overrides change a run's recipe; "),
    (lambda m, d: m({"train": d, "test": d}), r"^data: a dict of \(texts, labels\) pair by split: evaluate\(model, "
                                               r"documents\) takes one split's documents; pass one$"),
    (lambda m, d: m({"text": d[0]}), r"^data: no column 'label' of labels, which evaluating needs; columns: text$"),
    (lambda m, d: m((d[0], ["neg", "meh"] * 3)), r"^data: row 2 of split 'documents': label 'meh' is not one of"),
    (lambda m, d: m(([" ", *d[0][1:]], d[1])), r"^data: row 1 of split 'documents': the document is empty or "),
    (lambda m, d: m(([], [])), r"^data: "),
    (lambda m, d: m("no-such-file.jsonl"), r"^data: no-such-file.jsonl does not exist$"),
    (lambda m, d: m(d, precision="half"), r"^precision must be one of "),
    (lambda m, d: m(42), r"^data: cannot use a builtins.int; pass "),
])
def test_each_bad_input_of_a_models_evaluation_is_one_line(tiny_backbone_dir, tmp_path, monkeypatch, call, expected):
    import longbert
    from helpers import build_model
    from longbert.errors import LongbertError

    monkeypatch.chdir(tmp_path)
    model = build_model(tiny_backbone_dir, "chunk")
    with pytest.raises(LongbertError, match=expected) as caught:
        call(lambda *args, **kwargs: longbert.evaluate(model, *args, **kwargs), documents())
    assert "\n" not in str(caught.value)


def test_each_bad_input_of_a_runs_evaluation_is_one_line(tmp_path):
    import longbert
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError, match=rf"^{tmp_path} is not a longbert run folder \(no recipe.yaml\)$"):
        longbert.evaluate(tmp_path, "test")
    (tmp_path / "recipe.yaml").write_text("name: x\n")
    with pytest.raises(LongbertError, match=r"^output: .* is evaluated as a run folder, which holds its evaluations"):
        longbert.evaluate(tmp_path, "test", output=tmp_path / "elsewhere")
    with pytest.raises(LongbertError, match=rf"^split: a run folder is evaluated on one of its splits \(train, "
                                            rf"validation, test\), got a tuple; .*evaluate\('{tmp_path}/best', "):
        longbert.evaluate(tmp_path, (["a"], ["neg"]))
    with pytest.raises(LongbertError, match=r"^override 'model.finetune=full': evaluate can change only the data"):
        longbert.evaluate(tmp_path, "test", overrides=["model.finetune=full"])


@pytest.mark.heavy
def test_a_runs_split_and_its_model_on_the_same_documents_measure_the_same(tiny_recipe, imdb_slice):
    import longbert
    from longbert.config import load_recipe

    result = longbert.train(load_recipe(None, tiny_recipe + ["train.epochs=1"]))
    run = longbert.evaluate(result.folder, "test", precision="fp32")
    rows = [json.loads(line) for line in (imdb_slice / "test.jsonl").read_text().splitlines()]
    model = longbert.LongDocumentClassifier.from_pretrained(result.model)
    for documents_ in (imdb_slice / "test.jsonl", ([r["text"] for r in rows], [r["label"] for r in rows])):
        alone = longbert.evaluate(model, documents_, precision="fp32")
        assert alone["documents"] == run["documents"] == 30
        assert (alone["accuracy"], alone["confusion_matrix"]) == (run["accuracy"], run["confusion_matrix"])
        assert alone["loss"] == pytest.approx(run["loss"], rel=1e-6)
    assert longbert.evaluate(result.model, imdb_slice / "test.jsonl", precision="fp32")["accuracy"] == run["accuracy"]


def test_the_cli_names_the_page_it_wrote_and_why_it_is_beside_the_runs_own():
    from longbert.evaluation.evaluate import evaluation_page
    from longbert.evaluation.metrics import headline

    run = Path("r")
    assert evaluation_page(run, "test", [], True) == "r/metrics-test.md"
    assert evaluation_page(run, "test", [], False) == ("r/metrics-test-uncalibrated.md (the model's calibration off: "
                                                       "its own test files are kept)")
    assert evaluation_page(run, "test", ["data.max_eval_documents=5"], False) == (
        "r/metrics-test-with-overrides-uncalibrated.md (other documents than the run's and the model's calibration "
        "off: its own test files are kept)")
    assert evaluation_page(run, "validation", ["eval.batch_size=4"], True) == "r/metrics-validation.md"
    assert headline({"accuracy": 1.0, "macro_f1": 1.0, "documents": 1}).endswith("(1 document)")
