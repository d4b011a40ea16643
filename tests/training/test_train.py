"""End-to-end training on a slice of real IMDb with a tiny model: what lands in the run folder, the kept model,
resuming exactly (every strategy, frozen mode too), the run folder's lock and checks, the frozen-backbone and LoRA
modes. Kills in the middle of a checkpoint are in test_checkpoint.py."""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import longbert
from helpers import TINY_STRATEGY_SETTINGS, StopAfterSteps, assert_same_run
from longbert.config import recipe_to_yaml
from longbert.errors import LongbertError
from longbert.evaluation.predictions import PROBABILITY_DIGITS
from longbert.strategies.registry import strategy_names
from longbert.training.stopping import TrainingInterrupted

pytestmark = pytest.mark.heavy  # trains, resumes or exports models: left out of the 1-minute subset

ROOT = Path(__file__).resolve().parents[2]


def test_end_to_end_run_folder(tiny_recipe, tmp_path, monkeypatch):
    from longbert.utils import hardware

    recipe = longbert.load_recipe(None, tiny_recipe)
    released = []  # a full garbage collection before each memory measurement
    monkeypatch.setattr(hardware, "release_freed_memory", lambda: released.append(1))
    result = longbert.train(recipe, command="pytest")
    assert len(released) == 1, "memory is measured for the test pass only, not for training's validations"
    run = result.folder
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
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == list(range(30)), "the data has no id column: the row index"
    assert all(r["label_name"] == ["neg", "pos"][r["label"]] and r["predicted_label"] == ["neg", "pos"][r["predicted"]]
               for r in rows)
    # The kept model answers predict() and evaluate() gives the same test accuracy.
    model = longbert.LongDocumentClassifier.from_pretrained(run)
    assert model.predict(["What a film."])[0]["label"] in ("neg", "pos")
    again = longbert.evaluate(run, "test")
    assert again["accuracy"] == pytest.approx(test["accuracy"])
    assert (run / "metrics-test.md").is_file()


def test_the_kept_model_is_calibrated_on_validation_and_answers_as_its_rows_say(tiny_recipe):
    """model.calibration=temperature: a temperature fitted on the validation predictions is saved with the kept
    model; its prediction rows hold the calibrated probabilities (the same labels) and those before; its test metrics
    measure both; the reloaded model answers the calibrated ones."""
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.epochs=1", "model.calibration=temperature"])
    result = longbert.train(recipe)
    calibration = result.metrics["calibration"]
    assert calibration["method"] == "temperature" and calibration["documents"] == 15
    saved = json.loads((result.folder / "best" / "longbert_config.json").read_text())
    assert saved["temperatures"] == calibration["temperatures"] and calibration["temperatures"][0] != 1
    for split in ("validation", "test"):
        rows = [json.loads(line) for line in (result.folder / f"predictions-{split}.jsonl").read_text().splitlines()]
        assert all(np.argmax(r["probabilities"]) == np.argmax(r["uncalibrated"]) == r["predicted"] for r in rows)
        assert not np.allclose([r["probabilities"] for r in rows], [r["uncalibrated"] for r in rows], atol=1e-3)
    test = result.metrics["test"]["calibration"]
    assert {"ece", "nll", "brier", "bins", "by_length", "coverage"} <= set(test)
    assert test["nll"] != test["uncalibrated"]["nll"]
    model = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    data = next(o.split("=", 1)[1] for o in tiny_recipe if o.startswith("data.path="))
    texts = [json.loads(line)["text"] for line in open(f"{data}/test.jsonl")][:4]
    answered = [list(r["probabilities"].values()) for r in model.predict(texts, precision="fp32")]
    # (the test pass batched the documents otherwise, and its rows keep 6 digits)
    np.testing.assert_allclose(answered, [r["probabilities"] for r in rows[:4]], atol=1e-4)
    # model.calibration=none: nothing fitted, nothing saved
    off = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.epochs=1", "model.calibration=none",
                                                                   f"output_dir={result.folder}-off"]))
    assert off.metrics["calibration"]["method"] == "none"
    assert "temperatures" not in json.loads((off.folder / "best" / "longbert_config.json").read_text())


def test_an_existing_run_folder_is_not_overwritten(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1"])
    longbert.train(recipe)
    with pytest.raises(LongbertError, match="already holds a run; pass --resume"):
        longbert.train(recipe)
    changed = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=2"])
    with pytest.raises(LongbertError, match=r"--resume: the recipe differs .*train.max_steps: 1 -> 2\)"):
        longbert.train(changed, resume=True)


def with_strategy(tiny_recipe: list[str], name: str) -> list[str]:
    return [o for o in tiny_recipe if not o.startswith("strategy.")] + [f"strategy.name={name}",
                                                                         *TINY_STRATEGY_SETTINGS[name]]




@pytest.fixture
def deterministic():
    """Bit-for-bit comparisons need deterministic kernels: by default, torch on CPU may sum the gradients of an
    embedding table in a varying order (bigbird's runs differ by ~1e-9 from one uninterrupted run to the next)."""
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


# Dropout on (so the random state matters), accumulation over 2 batches, 3 optimiser steps per epoch, a training
# log line every 2 steps (the stop at step 4 falls right after one; the resumed run logs the rest).
RESUMABLE = ["backbone.hidden_dropout=0.1", "train.gradient_accumulation=2", "train.epochs=2",
             "train.log_every_steps=2"]


def training_losses(run: Path) -> list:
    log = json.loads((run / "metrics.json").read_text())["train_log"]
    return [(e["step"], e["loss"], e["learning_rate"]) for e in log]


# truncate and sliding read through chunk's window code and hold no state of their own: CI resumes chunk, and the
# strategies whose modules differ (bigbird's attention plan, recurrence's and rmt's memory); -m slow resumes them all.
WINDOW_TWINS = ("truncate", "sliding")


@pytest.mark.parametrize("strategy", [pytest.param(name, marks=pytest.mark.slow) if name in WINDOW_TWINS else name
                                      for name in strategy_names()])
def test_resume_continues_exactly_where_it_stopped(tiny_recipe, tmp_path, strategy, deterministic):
    overrides = with_strategy(tiny_recipe, strategy) + RESUMABLE
    longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'a'}"]))

    stopped = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'b'}"])
    with pytest.raises(TrainingInterrupted, match="stopped at step 4"):
        longbert.train(stopped, stop=StopAfterSteps(4))
    state = json.loads((tmp_path / "b" / "checkpoint" / "state.json").read_text())["loop"]
    assert state["global_step"] == 4 and state["epoch"] == 1 and state["batches_in_epoch"] == 2
    assert not (tmp_path / "b" / "metrics.json").exists()
    longbert.train(stopped, resume=True)
    assert_same_run(tmp_path / "a", tmp_path / "b")
    assert training_losses(tmp_path / "a") == training_losses(tmp_path / "b")
    assert [step for step, _, _ in training_losses(tmp_path / "b")] == [2, 4, 6]


def test_frozen_mode_resumes_exactly(tiny_recipe, tmp_path, deterministic):
    overrides = tiny_recipe + ["model.finetune=frozen", "train.frozen_head_epochs=3", "strategy.pooling=attention"]
    straight = longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'a'}"]))
    assert straight.metrics["steps"] == 18, "frozen_head_epochs epochs of 6 batches"

    stopped = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'b'}"])
    with pytest.raises(TrainingInterrupted, match="stopped at step 8"):
        longbert.train(stopped, stop=StopAfterSteps(8))
    longbert.train(stopped, resume=True)
    assert_same_run(tmp_path / "a", tmp_path / "b")


@pytest.mark.parametrize("strategy, untrainable", [("rmt", "strategy.memory"),
                                                   ("recurrence", "strategy.distance_bias")])
def test_frozen_mode_refuses_strategy_weights_it_cannot_train(tiny_recipe, strategy, untrainable):
    recipe = longbert.load_recipe(None, with_strategy(tiny_recipe, strategy) + ["model.finetune=frozen"])
    with pytest.raises(LongbertError, match=f"model.finetune=frozen cannot train {untrainable}: ") as error:
        longbert.train(recipe)
    assert "\n" not in str(error.value)
    assert not Path(recipe.output_dir).exists(), "refused before anything was written"


def test_frozen_mode_trains_a_strategy_whose_weights_all_act_on_the_cache(tiny_recipe):
    recipe = longbert.load_recipe(None, with_strategy(tiny_recipe, "recurrence") + [
        "model.finetune=frozen", "strategy.distance_bias=false", "strategy.pooling=attention", "train.max_steps=2"])
    assert longbert.train(recipe).metrics["steps"] == 2


def test_the_reported_test_metrics_are_those_of_the_kept_model(tiny_recipe, monkeypatch):
    # fp32 everywhere (evaluate() would pick bf16 on a fast CPU), so that metrics compare exactly.
    monkeypatch.setattr("longbert.evaluation.split_pass.autocast_for",
                        lambda *_: torch.autocast("cpu", enabled=False))
    # Validation after every step with a learning rate high enough to overshoot: the kept model is not the last one.
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.eval_every_steps=1", "train.learning_rate=0.05",
                                                      "train.best_metric=loss", "train.warmup_ratio=0"])
    result = longbert.train(recipe)
    history, best_step = result.metrics["validation_history"], result.metrics["best_step"]
    kept = next(h for h in history if h["step"] == best_step)
    assert best_step != result.metrics["steps"] and history[-1]["loss"] != pytest.approx(kept["loss"]), \
        "the test needs a kept model that is not the last one"
    # best/ holds the kept model: its validation loss is the one recorded at the kept step ...
    assert longbert.evaluate(result.folder, "validation")["loss"] == pytest.approx(kept["loss"], rel=1e-6)
    # ... and the test metrics reported by training are those a fresh evaluation of best/ gives.
    fresh = longbert.evaluate(result.folder, "test")
    reported = result.metrics["test"]
    assert reported["confusion_matrix"] == fresh["confusion_matrix"] and reported["accuracy"] == fresh["accuracy"]
    assert reported["loss"] == pytest.approx(fresh["loss"], rel=1e-6)


def test_a_run_loads_its_backbone_and_tokenizer_once(tiny_recipe, monkeypatch):
    import transformers

    loads = []
    for name in ("AutoModel", "AutoTokenizer"):
        original = getattr(transformers, name).from_pretrained
        monkeypatch.setattr(getattr(transformers, name), "from_pretrained",
                            lambda *a, _load=original, _name=name, **k: loads.append(_name) or _load(*a, **k))

    def reload(*args, **kwargs):
        raise AssertionError("the kept model is evaluated in memory, not reloaded from best/")

    monkeypatch.setattr(longbert.LongDocumentClassifier, "from_pretrained", reload)
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.max_steps=2"]))
    assert sorted(loads) == ["AutoModel", "AutoTokenizer"]
    assert "test" in result.metrics and (result.folder / "best" / "head.safetensors").is_file()


def test_a_run_folder_in_use_is_refused(tiny_recipe):
    """Two trainings started into one run folder: the second gets one clear error, and nothing of it lands there."""
    import subprocess
    import sys

    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=1"])
    run_dir = Path(recipe.output_dir)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from longbert.utils.destinations import locked\n"
         "with locked(Path(sys.argv[1])):\n    print('locked', flush=True); sys.stdin.read()", str(run_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LongbertError, match=f"run folder {run_dir} is in use by another longbert process"):
            longbert.train(recipe)
        assert list(run_dir.iterdir()) == []
        (run_dir / "recipe.yaml").write_text(recipe_to_yaml(recipe))
        with pytest.raises(LongbertError, match="in use by another longbert process"):
            longbert.evaluate(run_dir)  # evaluating writes into the folder too
        (run_dir / "recipe.yaml").unlink()
    finally:
        holder.communicate("")
    assert holder.returncode == 0
    assert longbert.train(recipe).metrics["steps"] == 1, "the lock goes with the process that held it"


def test_resume_refuses_a_checkpoint_written_by_another_recipe(tiny_recipe):
    """A folder mixed by two runs: recipe.yaml from one, the checkpoint from the other."""
    first = longbert.load_recipe(None, tiny_recipe)
    with pytest.raises(TrainingInterrupted):
        longbert.train(first, stop=StopAfterSteps(2))
    other = longbert.load_recipe(None, tiny_recipe + ["train.learning_rate=2e-3"])
    (Path(other.output_dir) / "recipe.yaml").write_text(recipe_to_yaml(other))
    with pytest.raises(LongbertError, match="checkpoint in .* was written by another recipe"):
        longbert.train(other, resume=True)


def test_resume_refuses_a_checkpoint_of_another_number_of_processes(tiny_recipe):
    """The steps per epoch and the learning-rate schedule are laid out for the processes that trained the run: a
    resume with another number would silently continue another schedule, so it is refused in one line."""
    recipe = longbert.load_recipe(None, tiny_recipe)
    with pytest.raises(TrainingInterrupted):
        longbert.train(recipe, stop=StopAfterSteps(2))
    state_file = Path(recipe.output_dir) / "checkpoint" / "state.json"
    saved = json.loads(state_file.read_text())
    assert saved["processes"] == 1
    saved["processes"] = 2  # as a run under `torchrun --nproc_per_node 2` writes it
    state_file.write_text(json.dumps(saved))
    with pytest.raises(LongbertError) as error:
        longbert.train(recipe, resume=True)
    message = str(error.value)
    assert f"the run in {recipe.output_dir} was trained by 2 processes and this start has 1 process" in message
    assert "torchrun --nproc_per_node 2" in message and "\n" not in message


def test_a_folder_holding_files_of_no_run_is_not_cleared(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe)
    Path(recipe.output_dir).mkdir()
    (Path(recipe.output_dir) / "recipe.yaml").write_text("left by a run that crashed while loading")
    (Path(recipe.output_dir) / "notes.txt").write_text("mine")
    with pytest.raises(LongbertError, match=r"holds files that no longbert run wrote \(notes.txt\)"):
        longbert.train(recipe)
    assert (Path(recipe.output_dir) / "notes.txt").read_text() == "mine"


def test_resume_without_checkpoint(tiny_recipe):
    with pytest.raises(LongbertError, match="has no checkpoint to continue from"):
        longbert.train(longbert.load_recipe(None, tiny_recipe), resume=True)


def test_frozen_backbone_trains_the_head_on_cached_embeddings(tiny_recipe, tiny_backbone_dir, monkeypatch):
    calls = []
    import longbert.training.frozen as frozen

    original = frozen.cache_units
    monkeypatch.setattr(frozen, "cache_units", lambda *a, **k: calls.append(a[3]) or original(*a, **k))
    recipe = longbert.load_recipe(None, tiny_recipe + ["model.finetune=frozen", "train.frozen_head_epochs=5",
                                                      "strategy.pooling=attention"])
    result = longbert.train(recipe)
    assert len(calls) == 2, "train and validation embeddings are computed once each"
    metrics = result.metrics
    assert len(metrics["validation_history"]) == 5
    kept = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    backbone = sum(p.numel() for p in kept.backbone.parameters())
    assert 0 < metrics["trainable_parameters"] < backbone / 10
    # The backbone came from a local folder, so best/ keeps it (self-contained), exactly as it was: frozen.
    from safetensors.torch import load_file

    saved, original = (load_file(Path(d) / "model.safetensors")
                       for d in (result.folder / "best" / "backbone", tiny_backbone_dir))
    assert saved.keys() == original.keys() and all(torch.equal(saved[k], original[k]) for k in saved)


def test_a_stop_request_while_embeddings_are_cached_stops_there_and_the_same_command_trains_again(
        tiny_recipe, monkeypatch):
    import longbert.training.frozen as frozen

    batches = []
    original = frozen.collate
    monkeypatch.setattr(frozen, "collate", lambda rows: batches.append(len(rows)) or original(rows))
    stop = threading.Event()
    stop.set()  # asked before the first batch is read: the cache stops there, not once it is finished
    recipe = longbert.load_recipe(None, tiny_recipe + ["model.finetune=frozen", "train.frozen_head_epochs=2"])
    with pytest.raises(TrainingInterrupted, match="while caching train embeddings, before its first checkpoint"):
        longbert.train(recipe, stop=stop)
    assert len(batches) == 1, "stopped after the batch being read"
    result = longbert.train(recipe)  # stopped before any checkpoint: the same command trains it from the start
    assert len(result.metrics["validation_history"]) == 2


def test_lora_run(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + ["model.finetune=lora", "train.max_steps=3"])
    result = longbert.train(recipe)
    assert (result.folder / "best" / "adapter" / "adapter_model.safetensors").is_file()
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


def test_the_training_loss_is_printed_and_recorded(tiny_recipe, capsys):
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.log_every_steps=5"]))
    log = result.metrics["train_log"]
    assert [e["step"] for e in log] == [5, 10, 12], "every 5 steps, and the steps left at the end"
    assert json.loads((result.folder / "metrics.json").read_text())["train_log"] == log
    for entry in log:
        assert entry["loss"] > 0 and entry["tokens_per_second"] > 0
    rates = [e["learning_rate"] for e in log]
    assert rates == sorted(rates, reverse=True) and rates[-1] == 0, "linear decay to 0 after the warmup"
    assert log[0]["epoch"] == 1 and log[-1]["epoch"] == 2
    printed = capsys.readouterr().err
    for entry in log:
        assert f"step {entry['step']}: train loss {entry['loss']:.4f}, learning rate {entry['learning_rate']:.2e}, " \
               f"{entry['tokens_per_second']:.0f} tokens/s\n" in printed
    assert result.metrics["stopped_early_at_step"] is None


def test_a_tracker_that_is_not_installed_is_refused_before_training(tiny_recipe, monkeypatch):
    monkeypatch.setattr("accelerate.utils.is_wandb_available", lambda: False)
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.report_to=wandb"])
    with pytest.raises(LongbertError, match="train.report_to=wandb: the wandb package is not installed"):
        longbert.train(recipe)
    assert not Path(recipe.output_dir).exists()


def test_tensorboard_receives_the_training_log(tiny_recipe):
    pytest.importorskip("tensorboard")
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.report_to=tensorboard",
                                                                      "train.log_every_steps=2", "train.max_steps=4"]))
    assert list((result.folder / "logs").rglob("events.out.tfevents.*")), "tensorboard's event files"


def test_early_stopping(tiny_recipe, capsys):
    # Validation after every step with a learning rate high enough to overshoot: the validation loss stops improving.
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.eval_every_steps=1", "train.learning_rate=0.05",
                                                      "train.best_metric=loss", "train.warmup_ratio=0",
                                                      "train.early_stopping_patience=2"])
    result = longbert.train(recipe)
    history, stopped = result.metrics["validation_history"], result.metrics["stopped_early_at_step"]
    assert stopped is not None and stopped < 12 and result.metrics["steps"] == stopped == history[-1]["step"]
    best = min(range(len(history)), key=lambda i: history[i]["loss"])
    assert len(history) - 1 - best == 2, "stopped at the second validation in a row without a lower loss"
    assert history[best]["step"] == result.metrics["best_step"]
    assert f"step {stopped}: stopping early, 2 validations without a better loss" in capsys.readouterr().err
    assert json.loads((result.folder / "metrics.json").read_text())["stopped_early_at_step"] == stopped


@pytest.fixture
def multi_label_slice(imdb_slice, tmp_path) -> Path:
    """The IMDb slice with multi-label targets: its sentiment, and `long` for reviews over 700 characters."""
    folder = tmp_path / "multi"
    folder.mkdir()
    for split in ("train", "test"):
        rows = [json.loads(line) for line in (imdb_slice / f"{split}.jsonl").read_text().splitlines()]
        with open(folder / f"{split}.jsonl", "w") as out:
            for row in rows:
                labels = [row["label"]] + (["long"] if len(row["text"]) > 700 else [])
                out.write(json.dumps({"text": row["text"], "label": labels}) + "\n")
    return folder


def test_multi_label_run_tunes_and_saves_its_thresholds(tiny_recipe, multi_label_slice):
    overrides = [o for o in tiny_recipe if not o.startswith(("data.path", "data.label_names"))]
    recipe = longbert.load_recipe(None, overrides + [
        f"data.path={multi_label_slice}", "data.label_names=[neg, pos, long]", "model.problem_type=multi_label",
        "model.multi_label_threshold=tune_per_label", "model.class_weights=balanced", "train.best_metric=micro_f1",
        "train.max_steps=4", "model.calibration=temperature"])
    result = longbert.train(recipe)
    test, thresholds = result.metrics["test"], result.metrics["thresholds"]
    # one temperature per label, fitted first: the thresholds are tuned on the calibrated probabilities, which
    # predict() and the prediction file decide on below
    assert len(result.metrics["calibration"]["temperatures"]) == 3
    per_label = test["calibration"]["per_label"]
    assert list(per_label) == ["neg", "pos", "long"] and all(0 <= m["ece"] <= 1 for m in per_label.values())
    assert set(test["calibration"]["uncalibrated"]["per_label"]) == set(per_label)
    assert {"exact_match", "micro_f1", "macro_f1", "hamming_loss"} <= set(test) and "accuracy" not in test
    assert all("accuracy" not in h and "exact_match" in h for h in result.metrics["validation_history"])
    assert len(thresholds) == 3 and test["thresholds"] == thresholds and all(0 < t < 1 for t in thresholds)
    saved = json.loads((result.folder / "best" / "longbert_config.json").read_text())
    assert saved["thresholds"] == thresholds
    page = (result.folder / "metrics.md").read_text()
    assert "exact match" in page and "Hamming loss" in page and "- accuracy" not in page
    # predict() and the prediction file decide at the saved thresholds.
    model = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    [answer] = model.predict(["A long, long review of a film."])
    assert answer["labels"] == [n for n, t in zip(model.label_names, thresholds) if answer["probabilities"][n] >= t]
    # The file keeps PROBABILITY_DIGITS of each probability: a label whose stored probability lies within that
    # rounding of its threshold (a temperature near 20 puts many at 0.5) was decided on digits the file does not keep.
    rounding = 0.5 * 10 ** -PROBABILITY_DIGITS
    for line in (result.folder / "predictions-test.jsonl").read_text().splitlines():
        row = json.loads(line)
        for name, p, t in zip(["neg", "pos", "long"], row["probabilities"], thresholds):
            if abs(p - t) > rounding:
                assert (name in row["predicted_label"]) == (p >= t), (name, p, t)
    assert longbert.evaluate(result.folder, "test")["exact_match"] == test["exact_match"]


def test_a_fixed_multi_label_threshold_is_used_and_saved(tiny_recipe, multi_label_slice):
    overrides = [o for o in tiny_recipe if not o.startswith(("data.path", "data.label_names"))]
    recipe = longbert.load_recipe(None, overrides + [
        f"data.path={multi_label_slice}", "data.label_names=[neg, pos, long]", "model.problem_type=multi_label",
        "model.multi_label_threshold=0.3", "train.max_steps=1"])
    result = longbert.train(recipe)
    assert result.metrics["thresholds"] == result.metrics["test"]["thresholds"] == [0.3] * 3


def test_multi_label_runs_through_the_cli_and_compare(tiny_recipe, multi_label_slice, tmp_path):
    from typer.testing import CliRunner

    from longbert.cli import app

    overrides = [o for o in tiny_recipe if not o.startswith(("data.path", "data.label_names", "output_dir",
                                                               "strategy."))]
    overrides += [f"data.path={multi_label_slice}", "data.label_names=[neg, pos, long]",
                  "model.problem_type=multi_label", "train.max_steps=1", "train.best_metric=micro_f1"]
    args = ["train"] + [a for o in overrides + ["strategy.name=chunk", "strategy.window=62",
                                                f"output_dir={tmp_path / 'cli'}"] for a in ("--set", o)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "test exact match" in result.output and "micro-F1" in result.output
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "cli"), "--split", "validation"])
    assert result.exit_code == 0 and "validation: exact match" in result.output, result.output

    compared = longbert.compare(["truncate", "chunk"],
                                overrides=overrides + ["truncate.max_tokens=62", "truncate.head_tokens=16",
                                                       "chunk.window=62"],
                                name="multi", runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports",
                                speed_documents=4, long_tokens=128).metrics
    for name in ("truncate", "chunk"):
        row = compared["strategies"][name]
        metrics = json.loads((tmp_path / "runs" / "multi" / name / "metrics.json").read_text())
        assert row["accuracy"] == metrics["test"]["exact_match"]
    assert any("exact match" in note for note in compared["notes"])
    assert "exact match" in (tmp_path / "reports" / "multi" / "report.md").read_text()


def test_length_grouped_batches_are_seeded_and_a_resumed_run_sees_the_same_ones(tiny_recipe, tmp_path, deterministic):
    from longbert.data.documents import length_grouped_order

    lengths = [(i * 37) % 500 + 1 for i in range(203)]
    order = length_grouped_order(lengths, 8, seed=5, group_batches=5)
    assert sorted(order) == list(range(203)) and order == length_grouped_order(lengths, 8, seed=5, group_batches=5)
    assert order != length_grouped_order(lengths, 8, seed=6, group_batches=5)
    spread = lambda o: sum(max(lengths[i] for i in o[k:k + 8]) - min(lengths[i] for i in o[k:k + 8])
                           for k in range(0, 200, 8))
    import random

    shuffled = list(range(203))
    random.Random(0).shuffle(shuffled)
    assert spread(order) < spread(shuffled) / 3, "batches hold documents of similar length"

    overrides = tiny_recipe + ["train.group_by_length=true"]
    longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'a'}"]))
    stopped = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'b'}"])
    with pytest.raises(TrainingInterrupted, match="stopped at step 3"):
        longbert.train(stopped, stop=StopAfterSteps(3))
    longbert.train(stopped, resume=True)
    assert_same_run(tmp_path / "a", tmp_path / "b")


def test_optimizer_steps_are_fused_and_followed_by_a_heap_trim_when_asked(tiny_recipe, monkeypatch, tmp_path):
    import longbert.training.finetune
    import longbert.training.optim

    trims, optimizers = [], []
    real_adamw = longbert.training.finetune.adamw
    monkeypatch.setattr(longbert.training.optim, "trim_heap", lambda: trims.append(1) or True)
    monkeypatch.setattr(longbert.training.finetune, "adamw",
                        lambda groups: optimizers.append(real_adamw(groups)) or optimizers[-1])
    longbert.train(longbert.load_recipe(None, tiny_recipe + ["train.max_steps=2"]))
    assert trims == [], "only when the recipe asks"
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + [
        "train.gradient_accumulation=2", "train.trim_heap=true", f"output_dir={tmp_path / 'trimmed'}"]))
    trimmed = 0 if torch.cuda.is_available() else 6  # the host's heap, on a run on the CPU only
    assert result.metrics["steps"] == 6 and len(trims) == trimmed, "once per optimiser step on the CPU, not per batch"
    assert [o.defaults["fused"] for o in optimizers] == [True, True]


@pytest.mark.skipif(not (sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"), reason="glibc only")
def test_trimming_the_heap_hands_freed_memory_back():
    """Freed heap blocks below the last live one stay resident until trimmed (glibc trims only the heap's top)."""
    from longbert.utils.hardware import _rss_bytes, trim_heap

    blocks = [bytearray(64 * 1024) for _ in range(4000)]  # 250 MB of heap, touched
    last = blocks[-1]
    del blocks
    before = _rss_bytes()
    assert trim_heap() is True
    assert before - _rss_bytes() > 100 * 2**20
    assert len(last) == 64 * 1024
