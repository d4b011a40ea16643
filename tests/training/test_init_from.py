"""`train.init_from`: a run that starts from an earlier model. Proved by equivalence: with a learning rate too small
to change any weight (the schema wants max_steps >= 1 and learning rates > 0; 1e-30 moves no float32 weight of a
trained model), the new run's kept model holds the earlier model's backbone and head bit for bit, whatever the new
strategy or fine-tuning mode, and what did not fit keeps exactly the values a run without init_from starts with.
Every refusal is one line before anything is written; a resumed run continues its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

import longbert
from helpers import ONE_STAGE, TINY_STRATEGY_SETTINGS, StopAfterSteps, assert_same_run, tiny_bert_config
from longbert.cli import app
from longbert.errors import LongbertError
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.training.checkpoint import read_fingerprint, recipe_fingerprint
from longbert.training.stopping import TrainingInterrupted

pytestmark = pytest.mark.heavy  # trains models: left out of the 1-minute subset

STILL = ["train.max_steps=1", "train.learning_rate=1e-30", "train.head_learning_rate=1e-30"]
BACKBONE = "best/backbone/model.safetensors"
HEAD = "best/head.safetensors"


def with_strategy(overrides: list[str], name: str, *extra: str) -> list[str]:
    return [o for o in overrides if not o.startswith("strategy.")] + [f"strategy.name={name}",
                                                                       *TINY_STRATEGY_SETTINGS[name], *extra]


def earlier_overrides(backbone_dir: str, data: Path, out: Path) -> list[str]:
    """tiny_recipe's settings (it is per test; the earlier runs are made once for the module)."""
    return [f"backbone.name={backbone_dir}", f"data.path={data}", "data.label_names=[neg, pos]",
            "data.validation_fraction=0.25", "data.max_document_tokens=400", "train.batch_size=8",
            "train.learning_rate=1e-3", "train.mixed_precision=no", "train.max_steps=2", "eval.batch_size=16",
            *ONE_STAGE, f"output_dir={out}"]


@pytest.fixture(scope="module")
def earlier(tiny_backbone_dir, imdb_slice, tmp_path_factory) -> Path:
    """A run folder: truncate, two steps of full fine-tuning from the tiny backbone."""
    out = tmp_path_factory.mktemp("earlier") / "truncated"
    overrides = with_strategy(earlier_overrides(tiny_backbone_dir, imdb_slice, out), "truncate")
    return longbert.train(longbert.load_recipe(None, overrides)).folder


@pytest.fixture(scope="module")
def earlier_lora(tiny_backbone_dir, imdb_slice, tmp_path_factory) -> Path:
    """A run folder: chunk with LoRA adapters, trained hard enough that merging them changes the weights."""
    out = tmp_path_factory.mktemp("earlier") / "adapted"
    overrides = with_strategy(earlier_overrides(tiny_backbone_dir, imdb_slice, out), "chunk") + [
        "model.finetune=lora", "train.learning_rate=1e-2", "train.warmup_ratio=0"]
    return longbert.train(longbert.load_recipe(None, overrides)).folder


def tensors(folder: Path, name: str) -> dict[str, torch.Tensor]:
    return load_file(folder / name)


@pytest.mark.parametrize("strategy, extra", [
    ("chunk", ["strategy.pooling=mean"]),  # mean pooling: no pooler weights, so every tensor comes from the start
    ("chunk", ["strategy.pooling=mean", "model.finetune=lora"]),  # the adapters go onto the loaded base weights
    # (sliding is chunk's module with another stride: nothing new to load)
    ("chunk", ["strategy.pooling=mean", "model.finetune=frozen"]),
    ("bigbird", []),  # positions past the earlier table: extended from the loaded one
])
def test_the_new_run_starts_from_the_earlier_backbone_and_head(earlier, tiny_backbone_dir, tiny_recipe, tmp_path,
                                                               strategy, extra):
    result = longbert.train(longbert.load_recipe(None, with_strategy(tiny_recipe, strategy, *extra) + STILL + [
        f"train.init_from={earlier}"]))
    run = result.folder
    old, new = tensors(earlier, BACKBONE), tensors(run, BACKBONE)
    original = load_file(Path(tiny_backbone_dir) / "model.safetensors")
    assert any(not torch.equal(old[k], original[k]) for k in old), "the earlier run changed the backbone"
    assert old.keys() == new.keys()
    positions = "embeddings.position_embeddings.weight"
    for key in old:
        if strategy == "bigbird" and key == positions:
            assert new[key].shape[0] > old[key].shape[0]
            assert torch.equal(new[key][: old[key].shape[0]], old[key]), "the table it extends is the earlier one"
        else:
            assert torch.equal(new[key], old[key]), key
    old_head, new_head = tensors(earlier, HEAD), tensors(run, HEAD)
    for key in ("head.weight", "head.bias"):
        assert torch.equal(new_head[key], old_head[key]), key
    report = result.metrics["init_from"]
    assert report["path"] == str(earlier) and report["model"] == str(earlier / "best")
    assert report["strategy"] == "truncate" and report["merged_lora"] is False and report["head_loaded"] is True
    assert report["loaded"] == len(old) + 2 and report["kept_new"] == []
    card = (run / "best" / "README.md").read_text()
    assert f"Initialised from `.../{earlier.name}` (its backbone and head; a `truncate` model): " in card


def test_what_does_not_fit_keeps_its_new_initialisation(earlier, tiny_recipe, tmp_path):
    """An attention pooler the earlier truncate model lacks: listed in kept_new, with the values a run without
    init_from starts with; the head still comes from the earlier model."""
    overrides = tiny_recipe + STILL + ["strategy.pooling=attention"]
    plain = longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'plain'}"]))
    started = longbert.train(longbert.load_recipe(None, overrides + [f"train.init_from={earlier}"]))
    pooler = sorted(k for k in tensors(started.folder, HEAD) if k.startswith("strategy."))
    assert pooler, "the attention pooler has weights"
    report = started.metrics["init_from"]
    assert sorted(report["kept_new"]) == pooler and report["head_loaded"] is True
    new, fresh, old = (tensors(d, HEAD) for d in (started.folder, plain.folder, earlier))
    for key in pooler:
        assert torch.equal(new[key], fresh[key]), key
    assert torch.equal(new["head.weight"], old["head.weight"])
    assert "init_from" not in plain.metrics


def test_lora_adapters_of_the_earlier_model_are_merged(earlier_lora, tiny_recipe):
    result = longbert.train(longbert.load_recipe(None, tiny_recipe + STILL + [f"train.init_from={earlier_lora}"]))
    assert result.metrics["init_from"]["merged_lora"] is True
    base = tensors(earlier_lora, BACKBONE)  # the backbone the adapters sat on, saved without them
    adapter = tensors(earlier_lora, "best/adapter/adapter_model.safetensors")
    settings = json.loads((earlier_lora / "best" / "longbert_config.json").read_text())["lora"]
    new = tensors(result.folder, BACKBONE)
    merged = 0
    for key in base:
        prefix = "base_model.model." + key.removesuffix(".weight")
        if f"{prefix}.lora_A.weight" not in adapter:
            # Weights the LoRA run did not train (biases still 0 among them, which a learning rate of 1e-30 moves
            # by 1e-30): the base backbone's.
            torch.testing.assert_close(new[key], base[key], rtol=0, atol=1e-25)
            continue
        a, b = adapter[f"{prefix}.lora_A.weight"], adapter[f"{prefix}.lora_B.weight"]
        assert b.abs().max() > 0, "the adapters were trained"
        expected = base[key] + b @ a * (settings["alpha"] / settings["r"])
        torch.testing.assert_close(new[key], expected, rtol=0, atol=1e-6)
        merged += 1
    assert merged == 4, "query and value of both layers"


def make_model_folder(backbone_dir: str, folder: Path, labels=("neg", "pos")) -> Path:
    recipe = longbert.load_recipe(None, [f"backbone.name={backbone_dir}", "strategy.name=chunk", "strategy.window=62"])
    LongDocumentClassifier.from_recipe(recipe, list(labels)).save_pretrained(folder)
    return folder


def other_backbone(tokenizer, folder: Path, **config) -> str:
    from transformers import BertModel

    BertModel(tiny_bert_config(**config), add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.mark.parametrize("case, fragments", [
    ("missing", ["does not exist; it must be an earlier run folder or a saved model folder"]),
    ("a backbone folder", ["is not a longbert run folder or model folder (no longbert_config.json"]),
    ("incomplete", ["is incomplete: no head.safetensors"]),
    ("labels", ["was trained on the labels neg, pos, meh, and this run's are neg, pos"]),
    ("labels from the data", ["was trained on the labels neg, pos, meh, and this run's are neg, pos"]),
    ("hidden size", ["has another backbone architecture", "hidden size 48 there, 32 here"]),
    ("vocabulary", ["has another backbone architecture", "vocabulary size 1000 there, 30522 here"]),
])
def test_a_start_that_cannot_be_is_one_line_and_writes_nothing(case, fragments, tiny_recipe, tiny_backbone_dir,
                                                               tokenizer, tmp_path):
    target = tmp_path / "earlier"
    extra = []
    if case == "a backbone folder":
        target = Path(tiny_backbone_dir)
    elif case == "incomplete":
        make_model_folder(tiny_backbone_dir, target)
        (target / "head.safetensors").unlink()
    elif case.startswith("labels"):
        make_model_folder(tiny_backbone_dir, target, labels=("neg", "pos", "meh"))
        extra = ["data.label_names=null"] if case == "labels from the data" else []
    elif case in ("hidden size", "vocabulary"):
        config = {"hidden_size": 48} if case == "hidden size" else {"vocab_size": 1000}
        make_model_folder(other_backbone(tokenizer, tmp_path / "other", **config), target)
    result = CliRunner().invoke(app, ["train", *[x for o in tiny_recipe + extra + [f"train.init_from={target}"]
                                                 for x in ("--set", o)]])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: train.init_from: {target}"), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not (tmp_path / "run").exists(), "no run folder"


def test_a_run_folder_that_was_there_is_left_as_it_was(tiny_recipe, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.yaml").write_text("name: stopped before its first checkpoint\n")  # a folder `prepare` would clear
    recipe = longbert.load_recipe(None, tiny_recipe + [f"train.init_from={tmp_path / 'nowhere'}"])
    with pytest.raises(LongbertError, match="does not exist"):
        longbert.train(recipe)
    assert [p.name for p in run.iterdir()] == ["recipe.yaml"]


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_a_resumed_run_continues_its_checkpoint(earlier, tiny_recipe, tmp_path, mode, deterministic):
    """Stopped and resumed, a run that started from an earlier model ends as the uninterrupted one: the checkpoint
    is loaded over the earlier weights, and a LoRA run's base weights (not in its checkpoint) are the earlier ones."""
    overrides = tiny_recipe + [f"model.finetune={mode}", "train.max_steps=4", f"train.init_from={earlier}"]
    longbert.train(longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'a'}"]))
    stopped = longbert.load_recipe(None, overrides + [f"output_dir={tmp_path / 'b'}"])
    with pytest.raises(TrainingInterrupted, match="stopped at step 2"):
        longbert.train(stopped, stop=StopAfterSteps(2))
    longbert.train(stopped, resume=True)
    assert_same_run(tmp_path / "a", tmp_path / "b", steps=4)
    metrics = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert metrics["init_from"]["path"] == str(earlier)


def test_a_changed_init_from_refuses_to_resume(earlier, earlier_lora, tiny_recipe, tmp_path):
    recipe = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=3", f"train.init_from={earlier}"])
    with pytest.raises(TrainingInterrupted):
        longbert.train(recipe, stop=StopAfterSteps(1))
    changed = longbert.load_recipe(None, tiny_recipe + ["train.max_steps=3", f"train.init_from={earlier_lora}"])
    with pytest.raises(LongbertError, match="--resume: the recipe differs"):
        longbert.train(changed, resume=True)
    assert recipe_fingerprint(changed) != read_fingerprint(tmp_path / "run" / "checkpoint") == recipe_fingerprint(
        recipe), "the fingerprint covers init_from"
    assert longbert.train(recipe, resume=True).metrics["steps"] == 3


def test_init_from_is_checked_with_the_recipe():
    for value, fragment in (('""', "train.init_from must name an earlier run folder"),
                            ("runs/me/best", "train.init_from must be another run's folder, not this run's own")):
        with pytest.raises(LongbertError, match=fragment):
            longbert.load_recipe(None, ["name=me", f"train.init_from={value}"])
