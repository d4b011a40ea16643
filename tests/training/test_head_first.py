"""train.head_first: the pooler and head trained alone on the frozen backbone's cached units, then the whole model
from there, in one run: the head stage is a step of the run's Trainer and writes no folder of its own. The main stage
starts from the head stage's head, its time counts in the run's, a run resumed in either stage ends as one that was
not stopped, and a strategy weight used while reading (recurrence's distance bias) waits for the main stage instead of
being refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import longbert
import longbert.training.finetune as finetune
import longbert.training.trainer as trainer
from helpers import TINY_STRATEGY_SETTINGS, StopAfterSteps, assert_same_run
from longbert.training.stopping import TrainingInterrupted

pytestmark = pytest.mark.heavy

HEAD_FIRST = ["train.head_first=true", "train.frozen_head_epochs=2", "train.epochs=1", "strategy.pooling=attention"]


def head_stage_weights(monkeypatch) -> dict:
    """Filled with the head stage's kept pooler and head when it hands them on: {"weights": {name: tensor}}."""
    handed = {}
    real = trainer.in_memory

    def recording(model, name):
        source = real(model, name)
        handed["weights"] = source.weights[1]
        return source

    monkeypatch.setattr(trainer, "in_memory", recording)
    return handed


def test_the_whole_model_starts_from_the_head_stage_in_memory_and_no_stage_writes_a_folder(tiny_recipe, monkeypatch):
    handed = head_stage_weights(monkeypatch)
    recipe = longbert.load_recipe(None, tiny_recipe + HEAD_FIRST)
    metrics = longbert.train(recipe).metrics
    run = Path(recipe.output_dir)
    assert not (run / "head_stage").exists(), "the head stage is a step of the run, not a run of its own"
    assert sorted(p.name for p in run.iterdir() if p.is_dir()) == ["best", "checkpoint"]
    assert metrics["head_stage"]["steps"] == 12, "2 epochs of 6 batches over the cache"
    assert metrics["init_from"]["path"] == "head_stage" and metrics["init_from"]["head_loaded"]
    assert metrics["train_seconds"] > metrics["head_stage"]["train_seconds"] > 0
    assert metrics["steps"] == 6 and "test" in metrics
    # The main stage started from the head stage's weights, validated them at step 0 as a candidate, and trained them
    # on: its kept head is the head stage's when nothing later beat step 0 on validation, and differs otherwise.
    assert metrics["validation_history"][0]["step"] == 0
    head = {k: v for k, v in handed["weights"].items() if k.startswith("head.")}
    final = load_file(run / "best" / "head.safetensors")
    same = all(torch.equal(head[k], final[k]) for k in head)
    assert head and set(head) <= set(final) and same == (metrics["best_step"] == 0)


@pytest.mark.parametrize("stopped_after", [5, 12 + 3], ids=["in-the-head-stage", "in-the-end-to-end-stage"])
def test_a_run_stopped_in_either_stage_and_resumed_ends_as_one_that_was_not(tiny_recipe, tmp_path, stopped_after):
    """One checkpoint folder for the run, which names the stage that wrote it: a run stopped in the head stage
    continues it, one stopped after it rebuilds the head stage's model from the checkpoint and continues the
    end-to-end stage; both end with the same model, predictions and record as a run never stopped."""
    overrides = [o for o in tiny_recipe if not o.startswith("output_dir=")] + HEAD_FIRST + ["train.eval_every_steps=2"]
    whole = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'whole'}"])
    longbert.train(whole)
    parts = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'parts'}"])
    with pytest.raises(TrainingInterrupted):
        longbert.train(parts, stop=StopAfterSteps(stopped_after))
    stage = json.loads((tmp_path / "parts" / "checkpoint" / "state.json").read_text())["loop"]["stage"]
    assert stage == ("head_stage" if stopped_after < 12 else "end_to_end")
    longbert.train(parts, resume=True)
    assert_same_run(tmp_path / "whole", tmp_path / "parts")


def test_a_checkpoint_without_the_head_stages_weights_is_refused_in_one_line(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + HEAD_FIRST)
    with pytest.raises(TrainingInterrupted):
        longbert.train(recipe, stop=StopAfterSteps(12 + 3))
    (Path(recipe.output_dir) / "checkpoint" / "start.safetensors").unlink()  # as an earlier longbert wrote it
    with pytest.raises(longbert.LongbertError, match="does not hold the head stage's weights") as error:
        longbert.train(recipe, resume=True)
    assert "\n" not in str(error.value)


def test_max_steps_caps_the_main_stage_and_leaves_the_head_stage_its_epochs(tiny_recipe):
    """train.max_steps is the end-to-end budget: a head stage cut to it would leave the pooler near its uniform start
    (a bigbird run on the depth probe with max_steps=105 stopped its head stage at 105 of 630 cached steps)."""
    recipe = longbert.load_recipe(None, tiny_recipe + HEAD_FIRST + ["train.max_steps=3"])
    metrics = longbert.train(recipe).metrics
    assert metrics["head_stage"]["steps"] == 12, "2 epochs of 6 batches over the cache, whatever max_steps says"
    assert metrics["steps"] == 3


def test_early_stopping_bounds_the_main_stage_and_leaves_the_head_stage_its_epochs(tiny_recipe, monkeypatch):
    """Patience is the end-to-end stage's: a head stage stopped by it after one flat validation leaves the head at
    its start (Hyperpartisan's stopped after 2 of 10 epochs, predicting one class)."""
    real = finetune.evaluate_split

    def never_better(*args, **kwargs):  # every validation scores the same: patience 1 would stop at the second
        metrics, raw = real(*args, **kwargs)
        return {**metrics, "accuracy": 0.5, "macro_f1": 0.5}, raw

    monkeypatch.setattr(finetune, "evaluate_split", never_better)
    recipe = longbert.load_recipe(None, tiny_recipe + HEAD_FIRST + ["train.early_stopping_patience=1",
                                                                    "train.epochs=3", "train.frozen_head_epochs=3"])
    metrics = longbert.train(recipe).metrics
    assert metrics["head_stage"]["steps"] == 18, "all 3 epochs of the head stage: patience did not stop it"
    assert metrics["stopped_early_at_step"] is not None and metrics["steps"] < 18, "patience stops the main stage"


def test_a_start_that_fine_tuning_does_not_beat_is_kept(tiny_recipe, monkeypatch):
    """Model selection counts the start: a run from train.init_from (as the main stage of head_first is) validates
    its starting weights at step 0, and when no later validation beats them, the kept model is the one it started
    from."""
    one_epoch = tiny_recipe + ["train.epochs=1", "strategy.pooling=attention", "train.eval_every_steps=3"]
    first = longbert.train(longbert.load_recipe(None, one_epoch))  # an earlier run to start from
    real, calls = finetune.evaluate_split, []

    def worse_after_the_start(*args, **kwargs):
        metrics, raw = real(*args, **kwargs)
        calls.append(kwargs.get("description"))
        if kwargs.get("description") == "validation" and len(calls) > 1:  # every validation after step 0's
            metrics = {**metrics, "accuracy": -1.0, "macro_f1": -1.0}
        return metrics, raw

    monkeypatch.setattr(finetune, "evaluate_split", worse_after_the_start)
    again = longbert.load_recipe(None, one_epoch + [f"train.init_from={first.folder}",
                                                    f"output_dir={first.folder}-again"])
    metrics = longbert.train(again).metrics
    assert calls[0] == "validation" and metrics["validation_history"][0]["step"] == 0
    assert metrics["best_step"] == 0 and len(metrics["validation_history"]) > 1
    kept = load_file(Path(again.output_dir) / "best" / "head.safetensors")
    start = load_file(first.folder / "best" / "head.safetensors")
    assert all(torch.equal(kept[k], start[k]) for k in start)


def test_patience_counts_the_trainings_own_validations_not_the_start(tiny_recipe, monkeypatch):
    """A trained start (step 0) competes to be kept but sets no bar for patience: after a start that scores 0.9, the
    first validations of training at 0.6 and 0.7 go on (the second beats the first), and the run stops at 0.65, the
    first without a better score than training's own best. The start is kept."""
    one_epoch = tiny_recipe + ["train.epochs=1", "strategy.pooling=attention"]
    first = longbert.train(longbert.load_recipe(None, one_epoch))
    real, scores = finetune.evaluate_split, iter([0.9, 0.6, 0.7, 0.65, 0.8, 0.8])

    def scripted(*args, **kwargs):
        metrics, raw = real(*args, **kwargs)
        if kwargs.get("description") == "validation":
            score = next(scores)
            metrics = {**metrics, "accuracy": score, "macro_f1": score}
        return metrics, raw

    monkeypatch.setattr(finetune, "evaluate_split", scripted)
    again = longbert.load_recipe(None, tiny_recipe + [
        "strategy.pooling=attention", "train.epochs=5", "train.eval_every_steps=2", "train.early_stopping_patience=1",
        f"train.init_from={first.folder}", f"output_dir={first.folder}-again"])
    metrics = longbert.train(again).metrics
    assert [h["macro_f1"] for h in metrics["validation_history"]] == [0.9, 0.6, 0.7, 0.65]
    assert metrics["stopped_early_at_step"] == 6 and metrics["best_step"] == 0


def test_recurrences_distance_bias_waits_for_the_main_stage(tiny_recipe):
    overrides = [o for o in tiny_recipe if not o.startswith("strategy.")] + [
        "strategy.name=recurrence", *TINY_STRATEGY_SETTINGS["recurrence"], *HEAD_FIRST, "train.max_steps=2"]
    metrics = longbert.train(longbert.load_recipe(None, overrides)).metrics  # not refused: the bias trains later
    assert metrics["head_stage"]["steps"] == 12 and metrics["steps"] == 2  # max_steps caps the main stage only


def test_head_first_with_a_frozen_backbone_adds_nothing_the_run_is_the_head_stage(tiny_recipe, tmp_path):
    # compare's base recipes set head_first, so `--set model.finetune=frozen` must still run: one stage, no head_stage/
    overrides = [o for o in tiny_recipe if not o.startswith("output_dir=")]
    frozen = ["model.finetune=frozen", "train.frozen_head_epochs=2", "strategy.pooling=attention"]
    plain = longbert.train(longbert.load_recipe(None, [*overrides, *frozen, f"output_dir={tmp_path / 'a'}"]))
    both = longbert.train(longbert.load_recipe(None, [*overrides, *frozen, "train.head_first=true",
                                                      f"output_dir={tmp_path / 'b'}"]))
    assert not (tmp_path / "b" / "head_stage").exists() and "head_stage" not in both.metrics
    same = {k: v for k, v in plain.metrics["test"].items() if k != "speed"}  # timings differ run to run
    assert {k: v for k, v in both.metrics["test"].items() if k != "speed"} == same
    assert both.metrics["steps"] == plain.metrics["steps"]
