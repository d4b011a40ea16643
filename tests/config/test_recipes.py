"""Every packaged recipe, in every folder, loads and validates through the loader of the command that runs it, and
starts with a comment giving that command."""

from __future__ import annotations

from pathlib import Path

import pytest

from longbert.config import (
    load_pretrain_recipe,
    load_recipe,
    read_recipe_file,
    recipe_from_dict,
    with_strategy_section,
)
from longbert.strategies.registry import get_entry

RECIPES = Path(__file__).resolve().parents[2] / "recipes"  # the checkout's link to longbert/recipes/
FINETUNE = sorted(RECIPES.glob("*.yaml"))
PRETRAIN = sorted((RECIPES / "pretrain").glob("*.yaml"))
COMPARE = sorted((RECIPES / "compare").glob("*.yaml"))


def header(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("#"))]


def test_there_are_recipes_of_every_kind():
    names = {p.name for p in FINETUNE}
    assert {"imdb_sliding.yaml", "imdb_truncate.yaml", "imdb_chunk.yaml", "imdb_quick.yaml"} <= names
    assert {"imdb_cpu.yaml", "imdb_gpu.yaml", "hyperpartisan_cpu.yaml"} <= {p.name for p in PRETRAIN}
    assert {"imdb.yaml", "hyperpartisan.yaml"} <= {p.name for p in COMPARE}
    every = {p.relative_to(RECIPES) for p in RECIPES.rglob("*.yaml")}
    assert every == {p.relative_to(RECIPES) for p in FINETUNE + PRETRAIN + COMPARE}, "no recipe outside the folders"


@pytest.mark.parametrize("path", FINETUNE, ids=lambda p: p.name)
def test_every_finetuning_recipe_validates_and_starts_with_its_command(path):
    recipe = load_recipe(path)
    assert recipe.name
    get_entry(recipe.strategy.name)
    assert header(path), "each recipe starts with a comment saying what it runs"
    assert any(f"longbert train recipes/{path.name}" in line for line in header(path)), \
        "the header comment gives the command that runs the recipe"


@pytest.mark.parametrize("path", PRETRAIN, ids=lambda p: p.name)
def test_every_pretraining_recipe_validates_and_starts_with_its_command(path):
    recipe = load_pretrain_recipe(path)
    assert recipe.name == f"pretrain_{path.stem}", "the run name it had before recipes were sorted into folders"
    get_entry(recipe.strategy.name)
    assert any(f"longbert pretrain recipes/pretrain/{path.name}" in line for line in header(path))


@pytest.mark.parametrize("path", COMPARE, ids=lambda p: p.name)
def test_every_compare_base_recipe_validates_and_starts_with_its_command(path):
    # compare reads the base recipe and each strategy's section; `train` the section of the recipe's own strategy
    recipe = recipe_from_dict(with_strategy_section(read_recipe_file(path, "compare"), str(path)), str(path))
    assert recipe.name == f"compare_{path.stem}", "the run name it had before recipes were sorted into folders"
    assert recipe.data.test_split, "compare reports on the test split"
    assert load_recipe(path) == recipe, "a compare base recipe is a fine-tuning recipe too"
    assert any("longbert compare" in line for line in header(path))


def test_each_finetune_mode_answers_one_property_the_same_in_a_recipe_and_a_saved_model():
    """The properties every decision reads (`trains_lora`, `backbone_frozen`, `trains_whole_backbone`): exactly the
    mode's own is true, and a recipe's ModelConfig and the ModelSettings built from it agree."""
    from longbert.config import FINETUNE_MODES, ModelConfig
    from longbert.modeling.settings import ModelSettings

    owner = {"lora": "trains_lora", "frozen": "backbone_frozen", "full": "trains_whole_backbone"}
    assert set(owner) == set(FINETUNE_MODES)
    for mode in FINETUNE_MODES:
        for holder in (ModelConfig(finetune=mode), ModelSettings(finetune=mode)):
            answers = {name: getattr(holder, name) for name in owner.values()}
            assert answers == {name: name == owner[mode] for name in owner.values()}, (mode, type(holder))
