"""One data file of labelled texts -> train, validation and test: the cut is stratified, seeded, disjoint and
complete, recorded (data-split.json), and refused in one line where a class is too small; a run of a file is named
after it; and the one-line command trains, tests and evaluates on the same documents."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from longbert.cli import app
from longbert.config import DataConfig, load_recipe
from longbert.data.carving import FileSplit, file_sha256
from longbert.data.documents import load_corpus
from longbert.errors import LongbertError
from longbert.utils.folders import SPLIT_FILE

WORDS = ["harbour", "winter", "letter", "brothers", "boat", "capital", "mayor", "summer", "band", "town"]
# 24 + 16 + 10 documents: three classes of different sizes.
LABELS = ["good"] * 24 + ["bad"] * 16 + ["mixed"] * 10


def rows(labels=LABELS) -> list[dict]:
    """One short made-up document per label, each text different, with an id."""
    return [{"id": f"doc{i}", "text": f"{label} review {i}: " + " ".join(WORDS[(i + k) % 10] for k in range(6)),
             "label": label} for i, label in enumerate(labels)]


def write_jsonl(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in items))
    return path


@pytest.fixture
def reviews(tmp_path) -> Path:
    return write_jsonl(tmp_path / "reviews.jsonl", rows())


def corpus_of(path, tokenizer, recipe_seed: int = 0, **settings):
    """The corpus of a data file at the recipe's seed `recipe_seed`; `settings`: the data section's."""
    return load_corpus(DataConfig(path=str(path), **settings), tokenizer, seed=recipe_seed)


def test_a_single_file_is_cut_into_train_validation_and_test_disjoint_and_complete(reviews, tokenizer):
    corpus = corpus_of(reviews, tokenizer)
    cut = corpus.file_split
    assert set(corpus.splits) == set(cut.rows) == {"train", "validation", "test"}
    every = [r for split in cut.rows.values() for r in split]
    assert sorted(every) == list(range(len(LABELS))), "every row in exactly one split"
    # 10% of 50 for test (5), 10% of the other 45 for validation (5), the rest trains
    assert {s: len(r) for s, r in cut.rows.items()} == {"train": 40, "validation": 5, "test": 5}
    texts = [r["text"] for r in rows()]
    for split, picked in cut.rows.items():
        assert list(corpus.splits[split]["text"]) == [texts[i] for i in picked], split
        assert cut.ids[split] == [f"doc{i}" for i in picked]
    assert corpus.stats["test"]["source_split"] == "carved from reviews.jsonl (10%)"
    assert corpus.stats["validation"]["source_split"] == "carved from reviews.jsonl (10% of the rest)"


def test_the_cut_is_stratified_by_label(tmp_path, tokenizer):
    labels = ["good"] * 60 + ["bad"] * 30 + ["mixed"] * 10
    path = write_jsonl(tmp_path / "many.jsonl", rows(labels))
    corpus = corpus_of(path, tokenizer, test_fraction=0.2, validation_fraction=0.25)
    names = corpus.label_names
    for split in ("train", "validation", "test"):
        counts = Counter(names[i] for i in corpus.splits[split]["labels"])
        share = {name: counts[name] / len(corpus.splits[split]) for name in ("good", "bad", "mixed")}
        assert share == pytest.approx({"good": 0.6, "bad": 0.3, "mixed": 0.1}, abs=0.04), split


def test_the_cut_is_seeded(reviews, tokenizer):
    first = corpus_of(reviews, tokenizer, recipe_seed=1).file_split
    assert corpus_of(reviews, tokenizer, recipe_seed=1).file_split == first
    other = corpus_of(reviews, tokenizer, recipe_seed=2).file_split
    assert other.rows["test"] != first.rows["test"] and other.seed == 2
    assert corpus_of(reviews, tokenizer, recipe_seed=9, seed=1).file_split == first, "data.seed draws the cut"


def test_data_split_json_records_the_file_seed_fractions_and_rows(reviews, tokenizer, tmp_path):
    cut = corpus_of(reviews, tokenizer, recipe_seed=3).file_split
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / SPLIT_FILE).write_text(cut.to_json())
    saved = json.loads((tmp_path / "run" / SPLIT_FILE).read_text())
    assert saved["source"] == str(reviews) and saved["sha256"] == file_sha256(reviews)
    assert (saved["seed"], saved["test_fraction"], saved["validation_fraction"]) == (3, 0.1, 0.1)
    assert saved["documents"] == 50 and saved["stratified"] is True
    assert FileSplit.read(tmp_path / "run") == cut and FileSplit.read(tmp_path) is None


def test_no_test_split_when_it_is_set_to_null(reviews, tokenizer):
    corpus = corpus_of(reviews, tokenizer, test_split=None)
    assert set(corpus.splits) == set(corpus.file_split.rows) == {"train", "validation"}
    assert corpus.file_split.test_fraction is None
    assert len(corpus.splits["train"]) + len(corpus.splits["validation"]) == 50


def test_a_class_too_small_to_cut_is_refused_in_one_line_naming_the_file_class_and_counts(tmp_path, tokenizer):
    path = write_jsonl(tmp_path / "few.jsonl", rows(["good"] * 10 + ["bad"] * 10 + ["rare"]))
    with pytest.raises(LongbertError) as refused:
        corpus_of(path, tokenizer)
    message = str(refused.value)
    assert "\n" not in message
    assert str(path) in message and "class 'rare' has 1 document" in message
    assert "at least 3 of each class; counts: bad 10, good 10, rare 1" in message
    two = write_jsonl(tmp_path / "two.jsonl", rows(["good"] * 10 + ["bad"] * 10 + ["rare"] * 2))
    assert set(corpus_of(two, tokenizer, test_split=None).splits) == {"train", "validation"}, "no test: 2 will do"


def test_other_splits_asked_of_one_file_are_refused(reviews, tokenizer):
    for setting in ({"validation_split": "validation"}, {"test_split": "holdout"}):
        with pytest.raises(LongbertError, match=r"is a single file, which holds one split: its test and validation"):
            corpus_of(reviews, tokenizer, **setting)


def test_csv_tsv_and_parquet_files_with_other_column_names(tmp_path, tokenizer):
    import pandas as pd

    frame = pd.DataFrame(rows()).rename(columns={"text": "body", "label": "y"})
    frame.to_csv(tmp_path / "a.csv", index=False)
    frame.to_csv(tmp_path / "a.tsv", index=False, sep="\t")
    frame.to_parquet(tmp_path / "a.parquet")
    cuts = [corpus_of(tmp_path / name, tokenizer, text_column="body", label_column="y").file_split
            for name in ("a.csv", "a.tsv", "a.parquet")]
    assert cuts[0].rows == cuts[1].rows == cuts[2].rows, "the same rows, the same cut, whatever the format"


def test_multi_label_files_are_cut_by_a_seeded_shuffle(tmp_path, tokenizer):
    items = [{"text": f"document {i} " + WORDS[i % 10], "label": [["a"], ["b"], ["a", "b"]][i % 3]} for i in range(30)]
    path = write_jsonl(tmp_path / "tags.jsonl", items)
    cut = load_corpus(DataConfig(path=str(path)), tokenizer, seed=0, multi_label=True).file_split
    assert cut.stratified is False and sorted(r for s in cut.rows.values() for r in s) == list(range(30))


@pytest.mark.parametrize("settings, name, output_dir", [
    ([], "reviews", "runs/reviews"),
    (["name=mine"], "mine", "runs/mine"),
    (["output_dir=elsewhere"], "reviews", "elsewhere"),
])
def test_a_run_is_named_after_its_file_unless_named(reviews, settings, name, output_dir):
    recipe = load_recipe(None, [f"data.path={reviews}", *settings])
    assert (recipe.name, recipe.output_dir) == (name, output_dir)


def test_a_run_of_a_folder_is_named_after_it_and_a_hub_id_keeps_the_default(tmp_path):
    folder = tmp_path / "my reviews (v2)"
    folder.mkdir()
    assert load_recipe(None, [f"data.path={folder}"]).name == "my_reviews_v2"
    assert load_recipe(None, ["data.path=someone/some_dataset"]).output_dir == "runs/run"


# ---------------------------------------------------------------------------------------------------------------
# The one-line command


def tiny_settings(backbone: str) -> list[str]:
    settings = [f"backbone.name={backbone}", "strategy.name=chunk", "strategy.window=40", "train.epochs=1",
                "train.head_first=false", "train.batch_size=8", "train.mixed_precision=no", "eval.batch_size=16"]
    return [a for s in settings for a in ("--set", s)]


@pytest.mark.heavy
def test_one_line_trains_on_a_file_and_evaluate_sees_the_same_test_documents(reviews, tiny_backbone_dir, tmp_path,
                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["train", "--set", "data.path=reviews.jsonl", *tiny_settings(tiny_backbone_dir)])
    assert result.exit_code == 0, result.output
    run = Path("runs/reviews")
    assert f"run folder: {run}" in result.output and "test accuracy" in result.output
    cut = FileSplit.read(run)
    assert cut.source == "reviews.jsonl" and cut.sha256 == file_sha256(reviews)
    tested = [json.loads(line)["id"] for line in (run / "predictions-test.jsonl").read_text().splitlines()]
    assert sorted(tested) == sorted(cut.ids["test"])
    metrics = json.loads((run / "metrics.json").read_text())
    assert [metrics["data"][s]["documents"] for s in ("train", "validation", "test")] == [40, 5, 5]
    result = CliRunner().invoke(app, ["evaluate", str(run)])
    assert result.exit_code == 0, result.output
    again = [json.loads(line)["id"] for line in (run / "predictions-test.jsonl").read_text().splitlines()]
    assert sorted(again) == sorted(tested), "evaluate tests the documents training tested"


def test_the_command_line_refuses_a_class_too_small_in_one_line_and_writes_nothing(tmp_path, monkeypatch,
                                                                                  tiny_backbone_dir):
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "few.jsonl", rows(["good"] * 10 + ["bad"] * 10 + ["rare"]))
    result = CliRunner().invoke(app, ["train", "--set", "data.path=few.jsonl", *tiny_settings(tiny_backbone_dir)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "class 'rare' has 1 document" in lines[0] and "few.jsonl" in lines[0]
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "few.jsonl"], "nothing written"
    assert not (tmp_path / "runs" / "few").exists()


@pytest.mark.heavy
@pytest.mark.parametrize("change", ["appended", pytest.param("reordered", marks=pytest.mark.slow)])
def test_a_run_whose_file_changed_is_refused_by_evaluate_resume_and_hybrid_in_one_line_and_left_as_it_was(
        reviews, tiny_backbone_dir, tmp_path, monkeypatch, change):
    monkeypatch.chdir(tmp_path)
    settings = ["--set", "data.path=reviews.jsonl", *tiny_settings(tiny_backbone_dir)]
    assert CliRunner().invoke(app, ["train", *settings]).exit_code == 0
    run = Path("runs/reviews")
    predictions = (run / "predictions-test.jsonl").read_text()
    every = rows()
    write_jsonl(reviews, every + rows(["good"])[:1] if change == "appended" else every[::-1])
    for command in (["evaluate", str(run)], ["train", *settings, "--resume"], ["hybrid", str(run)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(lines) == 1 and "reviews.jsonl has changed since the run" in lines[0], result.output
        assert "data-split.json" in lines[0]
        assert (run / "predictions-test.jsonl").read_text() == predictions, "nothing rewritten"
        assert not (run / "hybrid").exists()
    from longbert.comparison.strategy_training import run_strategy  # compare's turn for a finished run: not reused

    with pytest.raises(LongbertError, match="compare: chunk: data.path reviews.jsonl has changed since the run"):
        run_strategy("chunk", load_recipe(run / "recipe.yaml"), "compare", "[1/1]")
