"""End-to-end training on a slice of real IMDb with a tiny model: what lands in the run folder, resuming,
the frozen-backbone and LoRA modes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

import longbert
from longbert.errors import LongbertError
from longbert.training import TrainingInterrupted


def test_end_to_end_run_folder(tiny_recipe, tmp_path):
    recipe = longbert.load_recipe(None, tiny_recipe)
    result = longbert.train(recipe, command="pytest")
    run = result.run_dir
    for name in ("recipe.yaml", "metrics.json", "metrics.md", "predictions-test.jsonl", "best/longbert_config.json",
                 "best/head.safetensors", "best/backbone/model.safetensors", "checkpoint/state.json"):
        assert (run / name).is_file(), name
    assert longbert.load_recipe(run / "recipe.yaml").to_dict() == recipe.to_dict(), "the resolved recipe is saved"
    metrics = json.loads((run / "metrics.json").read_text())
    test = metrics["test"]
    assert test["documents"] == 30 and 0 <= test["accuracy"] <= 1
    assert sum(b["documents"] for b in test["by_length"].values()) == 30
    assert set(test["per_class"]) == {"neg", "pos"} and len(test["confusion_matrix"]) == 2
    assert test["speed"]["documents_per_second"] > 0 and test["speed"]["peak_memory_mb"] > 0
    assert len(metrics["validation_history"]) == 2, "evaluated once per epoch"
    assert metrics["data"]["train"]["documents"] == 45 and "cut_by_token_cap" in metrics["data"]["train"]
    assert metrics["trainable_parameters"] > 0 and metrics["steps"] == 12
    lines = (run / "predictions-test.jsonl").read_text().splitlines()
    assert len(lines) == 30 and len(json.loads(lines[0])["unit_weights"]) >= 1
    # The kept model answers predict() and evaluate() gives the same test accuracy.
    model = longbert.LongDocumentClassifier.from_pretrained(run)
    assert model.predict(["What a film."])[0]["label"] in ("neg", "pos")
    again = longbert.evaluate(run, "test")
    assert again["accuracy"] == pytest.approx(test["accuracy"])
    assert (run / "metrics-test.md").is_file()


def test_an_existing_run_folder_is_not_overwritten(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1"])
    longbert.train(recipe)
    with pytest.raises(LongbertError, match="already holds a run; pass --resume"):
        longbert.train(recipe)
    changed = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=2"])
    with pytest.raises(LongbertError, match="--resume: the recipe differs"):
        longbert.train(changed, resume=True)


def test_resume_continues_exactly_where_it_stopped(tiny_recipe, tmp_path, monkeypatch):
    straight = longbert.load_recipe(None, tiny_recipe + ["strategy.pooling=attention", f"output_dir={tmp_path / 'a'}",
                                                        "backbone.hidden_dropout=0.1"])
    longbert.train(straight)

    stopped = longbert.load_recipe(None, tiny_recipe + ["strategy.pooling=attention", f"output_dir={tmp_path / 'b'}",
                                                       "backbone.hidden_dropout=0.1"])
    monkeypatch.setattr("longbert.training._should_stop", lambda state: state.global_step == 7)
    with pytest.raises(TrainingInterrupted, match="stopped at step 7"):
        longbert.train(stopped)
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())
    assert state["global_step"] == 7 and state["epoch"] == 1 and state["batches_in_epoch"] == 1
    assert not (tmp_path / "b" / "metrics.json").exists()
    monkeypatch.undo()
    longbert.train(stopped, resume=True)

    a = load_file(tmp_path / "a" / "checkpoint" / "model.safetensors")
    b = load_file(tmp_path / "b" / "checkpoint" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], msg=name)
    history = lambda d: json.loads((tmp_path / d / "metrics.json").read_text())["validation_history"]
    assert history("a") == history("b")


def test_resume_without_checkpoint(tiny_recipe):
    with pytest.raises(LongbertError, match="has no checkpoint to continue from"):
        longbert.train(longbert.load_recipe(None, tiny_recipe), resume=True)


def test_frozen_backbone_trains_the_head_on_cached_embeddings(tiny_recipe, monkeypatch):
    calls = []
    import longbert.frozen as frozen

    original = frozen.cache_units
    monkeypatch.setattr(frozen, "cache_units", lambda *a, **k: calls.append(a[3]) or original(*a, **k))
    recipe = longbert.load_recipe(None, tiny_recipe + ["model.finetune=frozen", "train.frozen_head_epochs=5",
                                                      "strategy.pooling=attention"])
    result = longbert.train(recipe)
    assert len(calls) == 2, "train and validation embeddings are computed once each"
    metrics = result.metrics
    assert len(metrics["validation_history"]) == 5
    backbone = sum(p.numel() for p in longbert.LongDocumentClassifier.from_pretrained(result.run_dir).backbone.parameters())
    assert 0 < metrics["trainable_parameters"] < backbone / 10
    assert not (result.run_dir / "best" / "backbone").exists()


def test_lora_run(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + ["model.finetune=lora", "train.max_steps=3"])
    result = longbert.train(recipe)
    assert (result.run_dir / "best" / "adapter" / "adapter_model.safetensors").is_file()
    assert result.metrics["steps"] == 3


def test_two_runs_with_different_precision_in_one_process(tiny_recipe, tmp_path):
    """accelerate's settings are process-wide; a second run (a notebook, `compare`) may change them."""
    for precision in ("no", "bf16"):
        recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1", f"train.mixed_precision={precision}",
                                                          f"output_dir={tmp_path / precision}"])
        assert longbert.train(recipe).metrics["mixed_precision"] == precision


def test_a_run_that_stopped_before_its_first_checkpoint_starts_again(tiny_recipe, tmp_path):
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1"])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "recipe.yaml").write_text("left by a run that crashed while loading")
    assert longbert.train(recipe).metrics["steps"] == 1
