"""`longbert compare --train-sizes`: nested training subsets with the same validation and test documents, one
compare per size, and the curve's report over them; its bad inputs, each one line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from longbert.cli import app
from longbert.comparison.learning_curve import learning_curve, parse_sizes
from longbert.config import DataConfig
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.utils.folders import CURVE_FILE

TEXTS = [f"review {i} " + ("good " if i % 2 else "bad ") * (3 + i % 7) for i in range(40)]
LABELS = ["neg", "pos"] * 20


def splits_at(tokenizer, size: int | None, nested: bool = True) -> dict:
    data = DataConfig(path="not-used", validation_fraction=0.25, max_train_documents=size, max_eval_documents=6,
                      nested_train=nested)
    corpus = load_corpus(data, tokenizer, seed=7, source={"train": (TEXTS, LABELS), "test": (TEXTS[::-1], LABELS)})
    return {role: list(split["text"]) for role, split in corpus.splits.items()}


def test_nested_training_subsets_grow_and_validation_stays(tokenizer):
    small, large, every = splits_at(tokenizer, 8), splits_at(tokenizer, 20), splits_at(tokenizer, None)
    assert len(small["train"]) == 8 and len(large["train"]) == 20 and len(every["train"]) == 30
    assert set(small["train"]) < set(large["train"]) < set(every["train"]), "each size holds every smaller one"
    assert small["validation"] == large["validation"] == every["validation"]
    assert small["test"] == large["test"] == every["test"] and len(small["test"]) == 6, "6 of 40, the same 6"
    assert splits_at(tokenizer, 20) == large, "the same seed draws the same documents"


def test_a_size_beyond_the_training_split_is_one_line(tokenizer):
    with pytest.raises(LongbertError, match=r"^data.max_train_documents=31: the training split has only 30 "):
        splits_at(tokenizer, 31)
    assert len(splits_at(tokenizer, 31, nested=False)["train"]) == 30, "without nesting, a limit above is all"


@pytest.mark.parametrize("text, message", [
    ("100,x", "positive whole numbers separated by commas, got 'x'"),
    ("0,10", "positive whole numbers separated by commas, got '0'"),
    ("300,100", "each size once, smallest first"),
    ("100,100", "each size once, smallest first"),
])
def test_bad_sizes_are_one_line(text, message):
    with pytest.raises(LongbertError, match=message):
        parse_sizes(text)
    result = CliRunner().invoke(app, ["compare", "--strategies", "truncate", "--train-sizes", text])
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_sizes_are_read_in_order():
    assert parse_sizes("100, 300,1000") == [100, 300, 1000]


def test_the_curve_refuses_a_size_set_by_hand_and_a_folder_it_did_not_write(tmp_path):
    with pytest.raises(LongbertError, match="--train-sizes sets data.max_train_documents"):
        learning_curve("truncate", [10], overrides=["data.max_train_documents=5"], name="c",
                       runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports")
    (tmp_path / "reports" / "c").mkdir(parents=True)
    (tmp_path / "reports" / "c" / "notes.txt").write_text("mine")
    with pytest.raises(LongbertError, match=f"already holds files this command did not write .*{CURVE_FILE}"):
        learning_curve("truncate", [10], name="c", runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports")
    assert (tmp_path / "reports" / "c" / "notes.txt").read_text() == "mine"
    assert not (tmp_path / "runs").exists(), "refused before any training"


def test_a_size_the_training_documents_cannot_hold_is_refused_before_the_smallest_trains(
        tiny_backbone_dir, imdb_slice, tmp_path):
    overrides = [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
                 "data.max_document_tokens=400", "data.test_longer_than=0", "truncate.max_tokens=62",
                 "truncate.head_tokens=16"]
    with pytest.raises(LongbertError, match=r"data.max_train_documents=1000000: the training split has only \d+ "):
        learning_curve("truncate", [8, 1_000_000], overrides=overrides, name="c", runs_dir=tmp_path / "runs",
                       reports_dir=tmp_path / "reports")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists(), "refused before any training"


@pytest.mark.heavy
@pytest.mark.slow  # two whole compares (17 s); its report folder's writing is in CI's tests/test_nothing_lost.py
def test_a_learning_curve_compares_at_every_size_and_reports_over_them(tiny_backbone_dir, imdb_slice, tmp_path):
    overrides = [f"backbone.name={tiny_backbone_dir}", f"data.path={imdb_slice}", "data.label_names=[neg, pos]",
                 "data.validation_fraction=0.25", "data.max_document_tokens=400", "data.test_longer_than=0",
                 "data.max_test_documents=null", "train.epochs=1", "train.batch_size=8", "train.learning_rate=0.001",
                 'train.mixed_precision="no"', "eval.batch_size=16", "truncate.max_tokens=62",
                 "truncate.head_tokens=16"]
    curve = learning_curve(["truncate"], [12, 24], None, overrides, "tinycurve", runs_dir=tmp_path / "runs",
                           reports_dir=tmp_path / "reports")
    folder = tmp_path / "reports" / "tinycurve"
    assert json.loads((folder / CURVE_FILE).read_text()) == curve
    assert (folder / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for size in (12, 24):
        results = json.loads((tmp_path / "reports" / f"tinycurve-n{size}" / "results.json").read_text())
        assert results["data"]["splits"]["train"]["documents"] == size
        assert curve["rows"]["truncate"][str(size)]["accuracy"] == results["strategies"]["truncate"]["accuracy"]
        assert curve["rows"]["tfidf"][str(size)]["accuracy"] == results["baseline"]["accuracy"]
        assert curve["deployable"][str(size)]["row"] == results["deployable"]["row"]
    report = (folder / "report.md").read_text()
    assert "| truncate |" in report and "| tfidf (baseline) |" in report and "](curve.png)" in report
    assert "[12](../tinycurve-n12/report.md)" in report
    again = learning_curve(["truncate"], [12, 24], None, overrides, "tinycurve", runs_dir=tmp_path / "runs",
                           reports_dir=tmp_path / "reports")
    assert again["rows"] == curve["rows"], "finished runs are reused, the curve rewritten the same"
