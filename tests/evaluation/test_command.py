"""What evaluation writes: metrics pages (with many classes, the top confusions as a table and the whole matrix
as a PNG heatmap) and one prediction row per document."""

from __future__ import annotations

import json

import numpy as np

from longbert.evaluation.command import evaluation_name, metrics_markdown, write_predictions
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
