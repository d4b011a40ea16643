"""The recipe defaults are what compare's base recipe established: a recipe of one's own gets them, and compare's
base recipe states only its data. A shipped recipe that differs from a default says why in a comment."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from longbert.config import head_epochs, load_recipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def flat(section, prefix: str = "") -> dict:
    """A dataclass (or dict) as {dotted.path: value}."""
    raw = dataclasses.asdict(section) if dataclasses.is_dataclass(section) else section
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_a_recipe_of_ones_own_gets_the_learned_recipe():
    recipe = load_recipe(None, ["data.path=mine.jsonl"])
    assert (recipe.strategy.name, recipe.strategy.pooling) == ("chunk", "vote")
    assert recipe.train.head_first and recipe.train.unit_loss_weight == 0.5
    assert (recipe.train.epochs, recipe.train.early_stopping_patience) == (3, 1)
    assert head_epochs(recipe.train, head_stage=True) == 3
    assert load_recipe(None, ["strategy.name=sliding"]).strategy.pooling == "attention"


def test_compares_base_recipe_sets_only_its_data():
    """Every training setting of `longbert compare`'s default base recipe is the default: a user's own recipe trains
    as compare's rows do."""
    base = load_recipe(RECIPES / "compare" / "imdb.yaml")
    defaults = load_recipe(None, [f"data.{k}={v}" for k, v in yaml.safe_load(
        (RECIPES / "compare" / "imdb.yaml").read_text())["data"].items()] + [f"name={base.name}"])
    assert flat(base) == flat(defaults)
    assert set(yaml.safe_load((RECIPES / "compare" / "imdb.yaml").read_text())) == {"name", "data"}


@pytest.mark.parametrize("stage, frozen_head_epochs, expected", [
    (True, None, 3),     # train.head_first's stage
    (False, None, 30),   # a run whose backbone stays frozen throughout: only its head trains, over the cache
    (True, 10, 10),      # set in the recipe: the same in both
    (False, 10, 10),
])
def test_head_epochs_follow_the_kind_of_run_unless_set(stage, frozen_head_epochs, expected):
    value = "null" if frozen_head_epochs is None else frozen_head_epochs
    train = load_recipe(None, [f"train.frozen_head_epochs={value}"]).train
    assert head_epochs(train, head_stage=stage) == expected


def test_a_frozen_head_epochs_below_one_is_refused():
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError, match="train.frozen_head_epochs must be >= 1 or null, got 0"):
        load_recipe(None, ["train.frozen_head_epochs=0"])


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.yaml")) + sorted((RECIPES / "compare").glob("*.yaml")),
                         ids=lambda p: p.relative_to(RECIPES).as_posix())
def test_a_shipped_recipe_that_changes_a_training_default_says_why(path):
    """Each train/strategy/backbone value a recipe sets that differs from the default carries a comment on its line
    (or is the strategy's name), so that a reader sees why it is not the default."""
    recipe, defaults = load_recipe(path), load_recipe(None, [f"strategy.name={load_recipe(path).strategy.name}"])
    changed = {k for k, v in flat(recipe).items() if flat(defaults).get(k) != v and k.split(".")[0] in (
        "train", "backbone", "model")}
    lines = path.read_text().splitlines()
    uncommented = []
    for key in changed:
        section, field = key.split(".", 1)
        field = field.split(".")[0]
        line = next((ln for ln in lines if ln.strip().startswith(f"{field}:")), None)
        if line is not None and "#" not in line:
            uncommented.append(key)
    assert not uncommented, f"{path.name} changes {sorted(uncommented)} from the defaults without a comment saying why"



def test_a_strategy_field_set_alone_applies_to_the_default_strategy():
    """`--set strategy.window=254` on a recipe that names no strategy sets chunk's window, as a newcomer expects; a
    field the default strategy lacks is refused with chunk's valid keys."""
    from longbert.errors import LongbertError

    assert load_recipe(None, ["strategy.window=254"]).strategy.window == 254
    with pytest.raises(LongbertError, match="unknown recipe key 'strategy.stride'; valid keys in strategy: name, wi"):
        load_recipe(None, ["strategy.stride=128"])
