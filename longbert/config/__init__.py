"""Recipes: YAML -> overrides -> validated dataclasses, for fine-tuning and pretraining.

    loader.py           reading YAML within bounds, `key.path=value` overrides, per-strategy sections
    validation.py       settings checked however they are made: `build` from plain data, `Validated` in Python
    lookup.py           a recipe file, or a packaged recipe by bare name (recipes/, recipes/pretrain/, recipes/compare/)
    optimizer.py        the optimiser settings fine-tuning and pretraining share
    train_reading.py    train.reading: gradient through the units that matter, lower layers cached
    recipe.py           Recipe and its sections, load_recipe
    pretrain_recipe.py  PretrainRecipe and its sections, load_pretrain_recipe

Nothing here loads torch or strategy code until a recipe is built. PACKAGED_RECIPES is re-exported to be read;
to point the lookup elsewhere (a test), patch `longbert.config.lookup.PACKAGED_RECIPES`.
"""

from longbert.config.loader import (
    PLAIN_NAME,
    RecipeLoader,
    apply_overrides,
    parse_override,
    read_yaml,
    recipe_differences,
    recipe_to_yaml,
    strategy_fields,
    strategy_sections,
    with_strategy_section,
    yaml_problem,
)
from longbert.config.lookup import PACKAGED_RECIPES, find_recipe, packaged_recipes, read_recipe_file
from longbert.config.optimizer import PRECISIONS
from longbert.config.pretrain_recipe import (
    MaskingConfig,
    PretrainDataConfig,
    PretrainRecipe,
    PretrainTrainConfig,
    load_pretrain_recipe,
    pretrain_recipe_from_dict,
)
from longbert.config.recipe import (
    BEST_METRICS,
    CLASS_WEIGHTS,
    FINETUNE_MODES,
    MULTI_LABEL,
    MULTI_LABEL_METRICS,
    PROBLEM_TYPES,
    SINGLE_LABEL,
    SINGLE_LABEL_METRICS,
    THRESHOLD_TUNING,
    TRACKERS,
    BackboneConfig,
    DataConfig,
    EvalConfig,
    FinetuneChoice,
    FinetuneMode,
    LoraConfig,
    ModelConfig,
    ProblemType,
    Recipe,
    TrainConfig,
    head_epochs,
    is_multi_label,
    load_recipe,
    recipe_from_dict,
)
from longbert.config.validation import StrategyConfig, Validated, build, build_strategy_config, short_repr

__all__ = [
    # fine-tuning recipes
    "Recipe", "DataConfig", "BackboneConfig", "LoraConfig", "ModelConfig", "TrainConfig", "EvalConfig",
    "StrategyConfig", "load_recipe", "recipe_from_dict", "head_epochs",
    "FINETUNE_MODES", "PROBLEM_TYPES", "BEST_METRICS", "SINGLE_LABEL_METRICS", "MULTI_LABEL_METRICS", "TRACKERS",
    "CLASS_WEIGHTS", "THRESHOLD_TUNING",
    # the problem type
    "ProblemType", "FinetuneMode", "FinetuneChoice", "SINGLE_LABEL", "MULTI_LABEL", "is_multi_label",
    # pretraining recipes
    "PretrainRecipe", "PretrainDataConfig", "MaskingConfig", "PretrainTrainConfig", "load_pretrain_recipe",
    "pretrain_recipe_from_dict",
    # shared optimiser settings
    "PRECISIONS",
    # reading, overrides, validation
    "Validated", "PLAIN_NAME", "RecipeLoader", "read_yaml", "yaml_problem", "parse_override", "apply_overrides",
    "build", "build_strategy_config", "recipe_to_yaml", "recipe_differences", "short_repr", "strategy_fields",
    "strategy_sections", "with_strategy_section",
    # recipe files and the packaged recipes
    "PACKAGED_RECIPES", "find_recipe", "packaged_recipes", "read_recipe_file",
]
