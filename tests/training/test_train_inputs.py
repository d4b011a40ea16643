"""What `longbert.train` takes besides a recipe: documents in memory for the train and validation roles, and a model
to fine-tune, whose backbone, strategy, problem type and classes become the run's. The start of such a run is the
model given, bit for bit: its validation at step 0 is the model's own evaluation on those documents."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import longbert
from helpers import build_model
from longbert.config import load_recipe
from longbert.errors import LongbertError
from longbert.training.train_inputs import as_recipe, recipe_and_documents, recipe_for_model


def rows(path: Path) -> tuple[list[str], list[str]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["text"] for r in lines], [r["label"] for r in lines]


def test_documents_in_memory_take_the_train_and_validation_roles():
    recipe, data = recipe_and_documents(longbert.Recipe(), (["a b", "c d"], ["x", "y"]), (["e"], ["x"]), None)
    assert list(data) == ["train", "validation"]
    assert (recipe.data.validation_split, recipe.data.test_split) == ("validation", None), "no test split"
    assert recipe.data.path == ("in-memory dict of (texts, labels) pair by split (train: 2 rows, validation: 1 rows)")
    carved, data = recipe_and_documents(longbert.Recipe(), (["a b", "c d"], ["x", "y"]), None, None)
    assert list(data) == ["train"] and carved.data.validation_split is None, "validation carved from train"
    with pytest.raises(LongbertError, match=r"^train: give the documents as data= or as train_dataset="):
        recipe_and_documents(longbert.Recipe(), (["a"], ["x"]), None, {"train": (["a"], ["x"])})
    with pytest.raises(LongbertError, match=r"^eval_dataset needs train_dataset"):
        recipe_and_documents(longbert.Recipe(), None, (["a"], ["x"]), None)
    with pytest.raises(LongbertError, match=r"^train_dataset: the \(texts, labels\) pair holds no documents$"):
        recipe_and_documents(longbert.Recipe(), ([], []), None, None)
    with pytest.raises(LongbertError, match=r"^eval_dataset: the dict of columns holds no documents$"):
        recipe_and_documents(longbert.Recipe(), (["a b"], ["x"]), {"text": [], "label": []}, None)
    with pytest.raises(LongbertError, match=r"^data\['test'\]: the dict of columns holds no documents$"):
        recipe_and_documents(longbert.Recipe(), None, None, {"train": (["a"], ["x"]), "test": {"text": []}})
    pandas = pytest.importorskip("pandas")
    with pytest.raises(LongbertError, match=r"^train_dataset: the pandas DataFrame holds no documents$"):
        longbert.train(longbert.Recipe(), train_dataset=pandas.DataFrame({"text": [], "label": []}))


def test_a_recipe_is_an_object_a_file_a_packaged_name_or_the_defaults(tmp_path):
    assert as_recipe(None) == longbert.Recipe()
    assert as_recipe("imdb_quick") == load_recipe("imdb_quick")
    recipe = longbert.Recipe()
    recipe.train.epochs = 0  # set after the recipe was built: train checks it again
    with pytest.raises(LongbertError, match=r"^recipe: train.epochs must be >= 1, got 0$"):
        as_recipe(recipe)
    with pytest.raises(LongbertError, match=r"^recipe: train takes a Recipe, a recipe file or a packaged recipe's "
                                            r"name, got a builtins.dict"):
        longbert.train({"train": {"epochs": 1}})


def test_a_model_given_sets_the_runs_backbone_strategy_and_classes(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "sliding", labels=("neg", "pos"))
    recipe = recipe_for_model(longbert.Recipe(output_dir=str(tmp_path / "run")), model)
    start = tmp_path / "run" / "start"
    assert recipe.strategy == model.settings.strategy and recipe.strategy is not model.settings.strategy
    assert (recipe.backbone.name, recipe.train.init_from) == (str(start / "backbone"), str(start))
    assert recipe.data.label_names == ["neg", "pos"] and recipe.model.problem_type == "single_label"
    # The recipe may repeat the model's settings; how it trains stays the recipe's own.
    same = longbert.Recipe(strategy=dataclasses.replace(model.settings.strategy, token_pooling="auto"),
                           data=longbert.DataConfig(label_names=["neg", "pos"]),
                           model=longbert.ModelConfig(finetune="frozen"))
    assert recipe_for_model(same, model).model.finetune == "frozen"


@pytest.mark.parametrize("recipe, problem", [
    (lambda: longbert.Recipe(strategy="bigbird"), "strategy.name is bigbird in the recipe, sliding in the model"),
    (lambda: longbert.Recipe(strategy=longbert.SlidingConfig(window=40, stride=10)),
     "strategy.stride is 10 in the recipe, 20 in the model"),
    (lambda: longbert.Recipe(backbone=longbert.BackboneConfig(name="bert-base-uncased")),
     "backbone.name is 'bert-base-uncased' in the recipe"),
    (lambda: longbert.Recipe(model=longbert.ModelConfig(problem_type="multi_label"),
                             train=longbert.TrainConfig(best_metric="micro_f1")),
     "model.problem_type is 'multi_label' in the recipe, 'single_label' in the model"),
    (lambda: longbert.Recipe(data=longbert.DataConfig(label_names=["bad", "good"])),
     "data.label_names is ['bad', 'good'] in the recipe, ['neg', 'pos'] in the model"),
])
def test_a_recipe_that_disagrees_with_the_model_given_is_refused_in_one_line(tiny_backbone_dir, recipe, problem):
    model = build_model(tiny_backbone_dir, "sliding")
    with pytest.raises(LongbertError) as caught:
        recipe_for_model(recipe(), model)
    text = str(caught.value)
    assert text.startswith("model: the recipe disagrees with the model given (") and problem in text
    assert text.endswith("leave these settings out of the recipe (the model's are used), or give a model built with "
                         "them") and "\n" not in text


def test_what_cannot_be_fine_tuned_is_refused(tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, "chunk")
    with pytest.raises(LongbertError, match=r"^train: model= and train.init_from \(runs/x\) both name the model"):
        recipe_for_model(longbert.Recipe(train=longbert.TrainConfig(init_from="runs/x")), model)
    with pytest.raises(LongbertError, match=r"^model: train fine-tunes a LongDocumentClassifier .*got a "
                                            r"builtins.str"):
        longbert.train(longbert.Recipe(output_dir=str(tmp_path / "run")), model="runs/x")
    assert not (tmp_path / "run").exists(), "refused before the run folder is touched"


@pytest.mark.heavy
def test_train_fine_tunes_a_model_given_on_documents_in_memory(tiny_recipe, imdb_slice, tmp_path):
    first = longbert.train(load_recipe(None, tiny_recipe + ["train.epochs=1"]))
    model = longbert.LongDocumentClassifier.from_pretrained(first.model)
    texts, labels = rows(imdb_slice / "train.jsonl")
    # The kept model comes back in memory, calibrated as saved: it answers as the folder it wrote does.
    assert isinstance(first.classifier, longbert.LongDocumentClassifier) and not first.classifier.training
    in_memory, saved = first.classifier.settings.to_dict(), model.settings.to_dict()
    assert in_memory.pop("backbone") != saved.pop("backbone") == "backbone/", "saved beside it; read from its source"
    assert in_memory == saved
    assert first.classifier.predict(texts[:6], precision="fp32") == model.predict(texts[:6], precision="fp32")
    train_docs, eval_docs = (texts[:40], labels[:40]), (texts[40:], labels[40:])
    recipe = longbert.Recipe(output_dir=str(tmp_path / "again"), data=longbert.DataConfig(max_document_tokens=400),
                             train=longbert.TrainConfig(epochs=1, batch_size=8, mixed_precision="no",
                                                        head_first=False, unit_loss_weight=0,
                                                        early_stopping_patience=None))
    result = longbert.train(recipe, model=model, train_dataset=train_docs, eval_dataset=eval_docs)
    assert result.model == result.folder / "best" and (result.model / "head.safetensors").is_file()
    saved = load_recipe(result.folder / "recipe.yaml")
    assert saved.strategy == model.settings.strategy and saved.train.init_from == str(result.folder / "start")
    assert (saved.data.validation_split, saved.data.test_split) == ("validation", None)
    metrics = result.metrics
    assert (metrics["data"]["train"]["documents"], metrics["data"]["validation"]["documents"]) == (40, 20)
    assert "test" not in metrics, "documents given by role have no test split"
    assert metrics["init_from"]["kept_new"] == [], "every weight of the new model is the model given's"
    # Its start is the model given: validated at step 0, it scores what the model scores on those documents.
    alone = longbert.evaluate(model, eval_docs, precision="fp32")
    start = metrics["validation_history"][0]
    assert start["step"] == 0 and start["loss"] == pytest.approx(alone["loss"], rel=1e-5)
    assert start["macro_f1"] == pytest.approx(alone["macro_f1"])
    # The start the recipe names is in the run folder, with the backbone that backbone.name names.
    assert longbert.LongDocumentClassifier.from_pretrained(result.folder / "start").label_names == ["neg", "pos"]
    assert saved.backbone.name == str(result.folder / "start" / "backbone")
    assert (result.folder / "start" / "backbone" / "tokenizer_config.json").is_file()


@pytest.mark.heavy
def test_train_takes_every_input_kind_with_one_call_shape(tiny_recipe, imdb_slice, tmp_path):
    """The recipe as a file (its documents from data.path) and the same documents in memory train the same run."""
    recipe = load_recipe(None, tiny_recipe + ["train.epochs=1", "data.test_split=null"])
    (tmp_path / "recipe.yaml").write_text(longbert.config.recipe_to_yaml(recipe))
    from_file = longbert.train(tmp_path / "recipe.yaml")
    texts, labels = rows(imdb_slice / "train.jsonl")
    in_memory = dataclasses.replace(recipe, output_dir=str(tmp_path / "memory"))
    from_objects = longbert.train(in_memory, data={"train": (texts, labels)})
    assert from_file.metrics["validation_history"] == from_objects.metrics["validation_history"]
    for result in (from_file, from_objects):
        assert isinstance(result, longbert.Result) and result.model == result.folder / "best"


def test_a_run_folder_keeps_the_start_a_model_was_given_as():
    from longbert.utils.folders import RUN_ENTRIES, START

    assert START in RUN_ENTRIES, "a run stopped early is cleared with its start, as with any folder a run writes"
