"""compare on the user's own documents: without --recipe, an override of data.path picks the packaged own-data base
recipe (every document, no caps, no length filter), the report is named after the file, and compare says in one
status line which base recipe it uses and how many documents."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from longbert.cli import app
from longbert.comparison.plan import base_recipe, describe_base, report_name, resolve_recipes

OWN = "recipes/compare/own_data.yaml"
IMDB = "recipes/compare/imdb.yaml"


@pytest.fixture
def reviews(tmp_path) -> Path:
    """reviews.csv: 40 short made-up reviews, half pos, half neg."""
    path = tmp_path / "reviews.csv"
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["text", "label"])
        for i in range(40):
            label = ["pos", "neg"][i % 2]
            verdict = "a wonderful film, I loved it" if label == "pos" else "a dull film, I wanted my money back"
            writer.writerow([f"review {i} of the harbour story: {verdict}", label])
    return path


def test_an_override_of_data_path_picks_the_own_data_base_recipe(reviews, tmp_path):
    assert base_recipe(None, [])[1] == IMDB
    assert base_recipe(None, [], data={"train": (["a"], ["b"])})[1] == OWN, "documents in memory are one's own too"
    raw, source, path = base_recipe(None, [f"data.path={reviews}"])
    assert (source, path) == (OWN, None)
    assert base_recipe("compare_imdb", [f"data.path={reviews}"])[1] == "compare_imdb", "a recipe given wins"
    recipes = resolve_recipes(["truncate", "chunk"], raw, source, [f"data.path={reviews}"], "x", tmp_path)
    for recipe in recipes.values():
        data = recipe.data
        assert (data.max_train_documents, data.max_eval_documents, data.max_test_documents) == (None, None, None)
        assert data.test_longer_than == 0 and data.test_split == "test" and data.path == str(reviews)


def test_the_report_is_named_after_the_file_unless_named(reviews):
    assert report_name(None, None, [f"data.path={reviews}"]) == "compare_reviews"
    assert report_name("mine", None, [f"data.path={reviews}"]) == "mine"
    assert report_name(None, None, []) == "compare_imdb"
    assert report_name(None, "compare_imdb", [f"data.path={reviews}"]) == "compare_imdb", "a recipe given names it"
    assert report_name(None, None, ["data.path=someone/some_dataset"]) == "compare_own_data", "not a local file"


def test_the_status_line_says_which_base_recipe_and_how_many_documents(reviews, tmp_path):
    raw, source, _ = base_recipe(None, [f"data.path={reviews}"])
    own = resolve_recipes(["chunk"], raw, source, [f"data.path={reviews}"], "x", tmp_path)["chunk"]
    assert describe_base(source, own, True) == (
        f"base recipe {OWN}: all 40 documents of {reviews}, cut into train, validation and test (each run's "
        "data-split.json); --set data.max_train_documents=N caps training; --recipe FILE starts from another base "
        "recipe")
    raw, source, _ = base_recipe(None, [])
    imdb = resolve_recipes(["chunk"], raw, source, [], "x", tmp_path)["chunk"]
    assert describe_base(source, imdb, True).startswith(
        f"base recipe {IMDB}: at most 1,000 training documents and at most 2,000 test documents longer than 512 "
        "tokens of imdb; --set data.path=FILE compares on your own documents (all of them)")


@pytest.mark.heavy
def test_compare_on_a_file_uses_all_of_it_and_says_so(reviews, tiny_backbone_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = [f"backbone.name={tiny_backbone_dir}", "chunk.window=40", "train.epochs=1", "train.head_first=false",
                "train.batch_size=8", "train.mixed_precision=no", "eval.batch_size=16", "data.path=reviews.csv"]
    result = CliRunner().invoke(app, ["compare", "--strategies", "chunk",
                                      *[a for s in settings for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    assert (f"compare: base recipe {OWN}: all 40 documents of reviews.csv, cut into train, validation and test"
            in result.output)
    saved = json.loads(Path("reports/compare_reviews/results.json").read_text())
    assert saved["strategies"]["chunk"]["documents"] == 4, "every test document of the cut (10% of 40)"
    run = Path("runs/compare/compare_reviews/chunk")
    cut = json.loads((run / "data-split.json").read_text())
    assert {s: len(r) for s, r in cut["rows"].items()} == {"train": 32, "validation": 4, "test": 4}
