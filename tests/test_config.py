"""Recipes: every file in recipes/ validates; bad recipes fail with every problem named by its YAML path."""

from __future__ import annotations

from pathlib import Path

import pytest

from longbert.config import load_recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.strategies.base import get_entry

RECIPES = sorted((Path(__file__).resolve().parents[1] / "recipes").glob("*.yaml"))


def test_there_are_recipes():
    names = {p.name for p in RECIPES}
    assert {"imdb_sliding.yaml", "imdb_truncate.yaml", "imdb_chunk.yaml", "imdb_quick.yaml"} <= names


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_every_recipe_validates_and_starts_with_its_command(path):
    recipe = load_recipe(path)
    assert recipe.name
    get_entry(recipe.strategy.name)
    lines = path.read_text().splitlines()
    header = lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]
    assert header, "each recipe starts with a comment saying what it runs"
    assert any(f"longbert train recipes/{path.name}" in line or "longbert compare" in line for line in header), \
        "the header comment gives the command that runs the recipe"


def test_overrides_apply_and_are_typed():
    recipe = load_recipe(None, ["strategy.name=sliding", "strategy.stride=128", "train.learning_rate=2e-5",
                                "data.label_names=[a, b]", "output_dir=/tmp/x"])
    assert recipe.strategy.name == "sliding" and recipe.strategy.stride == 128
    assert recipe.train.learning_rate == 2e-5 and recipe.data.label_names == ["a", "b"]
    assert recipe.output_dir == "/tmp/x"


def test_integers_are_accepted_where_floats_are_expected():
    assert load_recipe(None, ["train.learning_rate=1"]).train.learning_rate == 1.0


def test_round_trip_through_yaml(tmp_path):
    recipe = load_recipe(None, ["strategy=truncate", "strategy.mode=tail"])
    path = tmp_path / "again.yaml"
    path.write_text(recipe_to_yaml(recipe))
    assert load_recipe(path) == recipe


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(LongbertError, match=r"unknown recipe key 'train.lr'; valid keys in train: epochs, max_steps"):
        load_recipe(None, ["train.lr=1e-4"])


def test_stride_larger_than_window_names_both_values():
    with pytest.raises(LongbertError, match=r"strategy.stride must be <= strategy.window, got 600 > 512"):
        load_recipe(None, ["strategy=sliding", "strategy.window=512", "strategy.stride=600"])


def test_unknown_strategy_lists_the_registry():
    with pytest.raises(LongbertError, match=r"unknown strategy 'chnk'; valid strategies: .*chunk.*sliding.*truncate"):
        load_recipe(None, ["strategy.name=chnk"])


def test_every_problem_is_collected_at_once():
    with pytest.raises(LongbertError) as error:
        load_recipe(None, ["train.epochs=0", "train.batch_size=big", "model.finetune=partly", "data.nope=1"])
    message = str(error.value)
    assert message.startswith("overrides has 4 problems")
    for part in ("train.epochs must be >= 1", "train.batch_size must be an integer", "model.finetune must be one of",
                 "unknown recipe key 'data.nope'"):
        assert part in message


def test_recipe_file_errors(tmp_path):
    with pytest.raises(LongbertError, match="recipe file not found"):
        load_recipe(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n")
    with pytest.raises(LongbertError, match="is not valid YAML"):
        load_recipe(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(LongbertError, match="must hold a mapping"):
        load_recipe(listy)
    with pytest.raises(LongbertError, match="must look like key.path=value"):
        load_recipe(None, ["train.epochs"])
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("data: 3\n")
    with pytest.raises(LongbertError, match="data must be a mapping"):
        load_recipe(wrong)
