"""Settings built in Python are checked as a YAML recipe is: on construction, through dataclasses.replace, with every
problem named by its YAML path in one LongbertError; a recipe read from YAML reports each problem once; a recipe's
strategy is a strategy's config, or a name for its defaults."""

from __future__ import annotations

import dataclasses

import pytest

import longbert
from longbert.config import (
    BackboneConfig,
    DataConfig,
    EvalConfig,
    LoraConfig,
    MaskingConfig,
    ModelConfig,
    PretrainDataConfig,
    PretrainRecipe,
    PretrainTrainConfig,
    Recipe,
    StrategyConfig,
    TrainConfig,
    load_recipe,
    recipe_from_dict,
)
from longbert.config.validation import building
from longbert.errors import LongbertError


def message(build) -> str:
    with pytest.raises(LongbertError) as caught:
        build()
    return str(caught.value)


def test_a_recipe_built_in_python_is_checked_as_it_is_built():
    assert message(lambda: Recipe(train=TrainConfig(epochs=0))) == "recipe: train.epochs must be >= 1, got 0"
    assert message(lambda: TrainConfig(epochs=0)) == "recipe: train.epochs must be >= 1, got 0"
    # Every problem of one construction in one line, each with its path; the recipe's own checks too.
    assert message(lambda: Recipe(name="a/b", train=TrainConfig(best_metric="micro_f1"))) == (
        "recipe has 2 problems: name 'a/b' must be a plain folder name (letters, digits, '.', '_', '-', not starting "
        "with '.'); a path belongs in output_dir; train.best_metric micro_f1 is not measured for model.problem_type "
        "single_label")


@pytest.mark.parametrize("build, expected", [
    (lambda: TrainConfig(epochs="3"), "recipe: train.epochs must be an integer, got '3'"),
    (lambda: TrainConfig(epochs=True), "recipe: train.epochs must be an integer, got True"),
    (lambda: DataConfig(path=3), "recipe: data.path must be a string, got 3"),
    (lambda: DataConfig(label_names=["neg", 1]), "recipe: data.label_names must be a list of str, got ['neg', 1]"),
    (lambda: BackboneConfig(gradient_checkpointing="yes"),
     "recipe: backbone.gradient_checkpointing must be true or false, got 'yes'"),
    (lambda: LoraConfig(dropout="lots"), "recipe: model.lora.dropout must be a number, got 'lots'"),
    (lambda: EvalConfig(batch_size=0), "recipe: eval.batch_size must be >= 1, got 0"),
    (lambda: EvalConfig(target_accuracy=1.0), "recipe: eval.target_accuracy must be in (0, 1), got 1.0"),
    (lambda: ModelConfig(calibration="platt"),
     "recipe: model.calibration must be one of auto, temperature, none, got 'platt'"),
    (lambda: Recipe(train={"epochs": 2}), "recipe: train must be a TrainConfig, got {'epochs': 2}"),
    (lambda: Recipe(seed=1.5), "recipe: seed must be an integer, got 1.5"),
    # A wrongly typed value is reported, and the other checks read the field's default (as YAML's are).
    (lambda: TrainConfig(epochs="x", learning_rate=-1),
     "recipe has 2 problems: train.epochs must be an integer, got 'x'; train.learning_rate and head_learning_rate "
     "must be > 0"),
])
def test_a_field_of_the_wrong_type_is_a_problem(build, expected):
    assert message(build) == expected


@pytest.mark.parametrize("override, expected", [
    ("train.learning_rate=nan", "train.learning_rate must be a finite number, got 'nan'"),
    ("train.head_learning_rate=inf", "train.head_learning_rate must be a finite number, got 'inf'"),
    ("train.warmup_ratio=.nan", "train.warmup_ratio must be a finite number, got nan"),
    ("model.class_weights=[1, .inf]", "model.class_weights must be a list of numbers > 0, got [1, inf]"),
    ("model.multi_label_threshold=.nan", "model.multi_label_threshold must be a number in (0, 1)"),
])
def test_a_setting_that_is_not_a_finite_number_is_refused_when_the_recipe_is_read(override, expected):
    """nan or inf would train a model of NaNs that reports an accuracy and exits 0 (a learning rate of nan, once)."""
    text = message(lambda: load_recipe("imdb_quick", [override]))
    assert expected in text and "\n" not in text
    assert "must be a finite number" in message(lambda: TrainConfig(learning_rate=float("nan")))


def test_values_are_converted_as_yaml_converts_them():
    train = TrainConfig(learning_rate=1, mixed_precision=False)  # YAML: `learning_rate: 1`, `mixed_precision: no`
    assert (train.learning_rate, type(train.learning_rate), train.mixed_precision) == (1.0, float, "no")
    assert TrainConfig(learning_rate="2e-5").learning_rate == 2e-5  # YAML reads 2e-5 as a string
    assert DataConfig(label_names=("neg", "pos")).label_names == ["neg", "pos"]


def test_replace_checks_again():
    recipe = Recipe()
    assert message(lambda: dataclasses.replace(recipe, seed="x")) == "recipe: seed must be an integer, got 'x'"
    assert message(lambda: dataclasses.replace(recipe.train, epochs=-2)) == "recipe: train.epochs must be >= 1, got -2"
    # A section changed after it was built is checked when the recipe is built again around it.
    train = TrainConfig()
    train.epochs = 0
    assert message(lambda: dataclasses.replace(recipe, train=train)) == "recipe: train.epochs must be >= 1, got 0"
    assert dataclasses.replace(recipe, seed=7).seed == 7


def test_a_strategy_is_a_config_or_a_name_for_its_defaults():
    chunk = longbert.ChunkConfig(pooling="max")
    recipe = Recipe(strategy=chunk)
    assert recipe.strategy is chunk and isinstance(recipe.strategy, StrategyConfig)
    assert Recipe(strategy="sliding").strategy == longbert.SlidingConfig()
    assert Recipe(strategy={"name": "chunk", "window": 200}).strategy == longbert.ChunkConfig(window=200)
    assert type(Recipe().strategy) is type(load_recipe(None).strategy), "the default strategy, as YAML's"
    assert message(lambda: Recipe(strategy="chnk")) == (
        "recipe: strategy.name: unknown strategy 'chnk'; valid strategies: bigbird, chunk, recurrence, rmt, sliding, "
        "truncate")
    assert message(lambda: Recipe(strategy=longbert.ChunkConfig(window=0))) == (
        "recipe: strategy.window must be >= 1, got 0")
    assert message(lambda: Recipe(strategy={"name": "chunk", "window": 0})) == (
        "recipe: strategy.window must be >= 1, got 0"), "reported once"
    assert message(lambda: Recipe(strategy=3)) == (
        "recipe: strategy must be a strategy's config (ChunkConfig(...)) or name, got 3")
    assert message(lambda: Recipe(strategy=longbert.SlidingConfig(window=100, stride=200))).startswith(
        "recipe: strategy.stride must be <= strategy.window")


def test_a_pretraining_recipe_is_checked_as_it_is_built():
    assert message(lambda: PretrainRecipe(train=PretrainTrainConfig(steps=0))) == (
        "recipe has 2 problems: train.steps must be >= 1, got 0; train.head_steps must be >= 0 and < train.steps, "
        "got 0 (steps 0)")
    assert message(lambda: MaskingConfig(probability=2)) == (
        "recipe: masking.probability must be between 0 and 1, got 2.0")
    assert message(lambda: PretrainDataConfig(min_tokens=-1)) == "recipe: data.min_tokens must be >= 0, got -1"
    assert PretrainRecipe(strategy="bigbird").strategy == longbert.BigBirdConfig()


def test_a_recipe_read_from_yaml_reports_each_problem_once():
    """The loader builds each section and then the recipe: the construction checks stay out of its way."""
    with pytest.raises(LongbertError) as caught:
        recipe_from_dict({"train": {"epochs": 0, "batch_size": "x"}, "strategy": {"name": "chunk", "window": 0}})
    assert str(caught.value) == (
        "recipe has 3 problems: train.batch_size must be an integer, got 'x'; train.epochs must be >= 1, got 0; "
        "strategy.window must be >= 1, got 0")
    with pytest.raises(LongbertError, match=r"^overrides \(--set\): train.epochs must be >= 1, got 0$"):
        load_recipe(None, ["train.epochs=0"])
    with building():  # what the loader does while it fills sections: nothing is checked on construction
        assert TrainConfig(epochs=0).epochs == 0


def test_a_recipe_from_yaml_and_one_built_in_python_are_the_same():
    built = Recipe(name="python", strategy=longbert.ChunkConfig(pooling="max"), train=TrainConfig(epochs=1),
                   model=ModelConfig(finetune="lora", lora=LoraConfig(r=4)))
    read = load_recipe(None, ["name=python", "strategy.name=chunk", "strategy.pooling=max", "train.epochs=1",
                              "model.finetune=lora", "model.lora.r=4"])
    assert built == read and built.to_dict() == read.to_dict()
