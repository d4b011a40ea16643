"""What `longbert.train` is given, made into what a run trains: the recipe (a Recipe, a recipe file or packaged name,
or nothing for the defaults), documents in memory by role (`train_dataset` and `eval_dataset`, or `data`), and a
model to fine-tune (`model`), which the run folder keeps as its start.

    recipe, documents = recipe_and_documents(recipe, train_dataset, eval_dataset, data)
    recipe = recipe_for_model(recipe, model)   # the model's backbone, strategy, problem type and classes
    save_start(model, recipe)                  # <run folder>/start, which the recipe's train.init_from names

A model given is a start, as `train.init_from` names one: the run builds the recipe's model and loads the given
model's weights into it (longbert.training.init_from), so that every stage a recipe asks for (the head stage,
contrastive tuning, self-training) starts from it, and a resumed run finds it in the run folder. How it trains
(model.finetune, the LoRA settings, dropout, the optimiser) is the recipe's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from longbert.config import BackboneConfig, ModelConfig, Recipe, load_recipe
from longbert.config.validation import default_strategy_config, short_repr
from longbert.data.objects import recipe_for_data_object, splits_by_role
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.ensemble import refuse_ensemble
from longbert.utils.folders import BACKBONE_DIR, START
from longbert.utils.hardware import process_state

AUTO = "auto"  # a strategy setting the model resolved when it was built (token_pooling), which any value matches


def as_recipe(recipe: Recipe | str | Path | None) -> Recipe:
    """A Recipe, checked again as it stands (a field set after it was built is checked too); a recipe file or the
    name of a packaged recipe, loaded; None: the defaults."""
    if recipe is None:
        return Recipe()
    if isinstance(recipe, (str, Path)):
        return load_recipe(recipe)
    if not isinstance(recipe, Recipe):
        raise LongbertError(f"recipe: train takes a Recipe, a recipe file or a packaged recipe's name, got a "
                            f"{type(recipe).__module__}.{type(recipe).__qualname__}")
    recipe.check()
    return recipe


def recipe_and_documents(recipe: Recipe, train_dataset: Any, eval_dataset: Any, data: Any) -> tuple[Recipe, Any]:
    """(the recipe whose data section describes the documents in memory, those documents as `data=` takes them).
    `train_dataset` and `eval_dataset` are the train and validation roles' documents (see
    `longbert.data.objects.splits_by_role`); `data`, documents by split as the recipe's data section names them.
    None of them: the recipe's data.path, and None."""
    if data is not None and (train_dataset is not None or eval_dataset is not None):
        raise LongbertError("train: give the documents as data= or as train_dataset= (and eval_dataset=), not both")
    if train_dataset is not None or eval_dataset is not None:
        data, settings = splits_by_role(train_dataset, eval_dataset, recipe.data)
        recipe = dataclasses.replace(recipe, data=dataclasses.replace(recipe.data, **settings))
    if data is not None:
        recipe = recipe_for_data_object(recipe, data)
    return recipe, data


def recipe_for_model(recipe: Recipe, model: Any) -> Recipe:
    """The recipe of a run that fine-tunes `model`: its backbone (the copy `save_start` writes), strategy, problem
    type and classes are the model's, and train.init_from names its start folder. A recipe that sets any of them
    otherwise than the model (or than the defaults) is refused in one line, as is one that names its own
    train.init_from."""
    if not isinstance(model, LongDocumentClassifier):
        raise LongbertError(f"model: train fine-tunes a LongDocumentClassifier (LongDocumentClassifier."
                            f"from_pretrained(folder)), got a {type(model).__module__}.{type(model).__qualname__}")
    refuse_ensemble(model, "model", "train(model=...) fine-tunes one model: pass one of its members")
    if recipe.train.init_from is not None:
        raise LongbertError(f"train: model= and train.init_from ({recipe.train.init_from}) both name the model to "
                            "start from; give one")
    settings = model.settings
    differ = _strategy_differences(recipe.strategy, settings.strategy)
    for path, asked, default, own in (
            ("backbone.name", recipe.backbone.name, BackboneConfig().name, settings.backbone),
            ("model.problem_type", recipe.model.problem_type, ModelConfig().problem_type, settings.problem_type),
            ("data.label_names", recipe.data.label_names, None, list(settings.label_names))):
        if asked not in (default, own):
            differ.append(f"{path} is {short_repr(asked)} in the recipe, {short_repr(own)} in the model")
    if differ:
        raise LongbertError(f"model: the recipe disagrees with the model given ({'; '.join(differ)}); leave these "
                            "settings out of the recipe (the model's are used), or give a model built with them")
    start = Path(recipe.output_dir) / START
    return dataclasses.replace(
        recipe, backbone=dataclasses.replace(recipe.backbone, name=str(start / BACKBONE_DIR)),
        strategy=dataclasses.replace(settings.strategy),
        model=dataclasses.replace(recipe.model, problem_type=settings.problem_type),
        data=dataclasses.replace(recipe.data, label_names=list(settings.label_names)),
        train=dataclasses.replace(recipe.train, init_from=str(start)))


def _strategy_differences(asked, own) -> list[str]:
    """Where the recipe's strategy differs from the model's, unless it is the default strategy (left unset)."""
    if asked == default_strategy_config():
        return []
    if asked.name != own.name:
        return [f"strategy.name is {asked.name} in the recipe, {own.name} in the model"]
    theirs = dataclasses.asdict(own)
    return [f"strategy.{key} is {short_repr(value)} in the recipe, {short_repr(theirs.get(key))} in the model"
            for key, value in dataclasses.asdict(asked).items() if value not in (theirs.get(key), AUTO)]


def save_start(model: LongDocumentClassifier, recipe: Recipe) -> None:
    """Write `model` as the start folder that `recipe` (from `recipe_for_model`) names: a model folder that holds its
    backbone's weights, and in backbone/ the tokenizer too, so that backbone/ is the run's backbone.name. Written by
    the main process, again when a run resumes (pass the same model)."""
    process = process_state()
    if process.is_main_process:
        start = Path(recipe.train.init_from)
        changed = model.backbone_weights_changed
        model.backbone_weights_changed = True  # the folder holds the backbone's weights, whatever its mode
        try:
            model.save_pretrained(start)
        finally:
            model.backbone_weights_changed = changed
        model.tokenizer.save_pretrained(start / BACKBONE_DIR)
    process.wait_for_everyone()
