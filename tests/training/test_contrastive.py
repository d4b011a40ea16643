"""train.contrastive_pairs: SetFit-style contrastive tuning of the backbone on pairs of training documents, as the
first stage of a run (run_dir/contrastive_stage). The pairs are what SetFit draws, the loss is its cosine loss, the
rest of the run starts from the tuned backbone, a frozen run's saved model holds the tuned backbone (not the one
its name loads), and a resumed run does not tune again."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import longbert
import longbert.modeling.model_folder as folder
from helpers import StopAfterSteps
from longbert.errors import LongbertError
from longbert.strategies.base import SpecialTokens
from longbert.training.contrastive import draw_pairs, pair_loss, window_batch
from longbert.training.stopping import TrainingInterrupted

CONTRASTIVE = ["train.contrastive_pairs=4", "train.contrastive_max_pairs=24", "train.contrastive_window=20",
               "train.contrastive_learning_rate=1e-3"]


def test_pairs_alternate_own_class_and_another_and_are_capped():
    labels = [0, 0, 0, 1, 1, 2, 2]
    pairs = draw_pairs(labels, per_document=4, max_pairs=1000, seed=0)
    assert len(pairs) == 2 * 2 * len(labels), "two rounds: one partner of each kind per document"
    for i, j, target in pairs:
        assert i != j
        assert (labels[i] == labels[j]) == (target == 1.0)
    assert sum(t == 1.0 for *_, t in pairs) == len(pairs) / 2
    assert draw_pairs(labels, 4, 1000, seed=0) == pairs, "seeded"
    assert draw_pairs(labels, 4, 1000, seed=1) != pairs
    assert len(draw_pairs(labels, 4, max_pairs=7, seed=0)) == 7


def test_a_document_alone_in_its_class_gets_only_other_partners():
    pairs = draw_pairs([0, 1, 1], per_document=2, max_pairs=100, seed=0)
    anchored = [(j, t) for i, j, t in pairs if i == 0]
    assert anchored and all(t == 0.0 for _, t in anchored)
    assert {t for i, _, t in pairs if i == 1} == {0.0, 1.0}
    # multi-label documents agree when their whole label sets do
    multi = draw_pairs([np.array([1, 0]), np.array([1, 0]), np.array([1, 1])], 2, 100, seed=0)
    assert all((i < 2 and j < 2) == (t == 1.0) for i, j, t in multi)


def test_the_loss_is_the_squared_error_of_the_windows_cosine(tiny_backbone, tokenizer):
    special = SpecialTokens.from_tokenizer(tokenizer)
    documents = [np.arange(1000, 1040), np.arange(2000, 2010)]
    ids, mask = window_batch(documents, [5, 0], 20, special)
    assert ids.shape == (2, 22) and ids[0, 0] == special.cls_id and ids[0, 21] == special.sep_id
    assert ids[0, 1:21].tolist() == list(range(1005, 1025)) and mask[1].sum() == 12  # 10 tokens, [CLS], [SEP]
    assert ids[1, 11] == special.sep_id and ids[1, 12] == special.pad_id
    tiny_backbone.eval()
    same = pair_loss(tiny_backbone, (ids, mask), (ids, mask), torch.tensor([1.0, 1.0]), "mean")
    assert same.item() == pytest.approx(0.0, abs=1e-5), "a window against itself: cosine 1"
    apart = pair_loss(tiny_backbone, (ids, mask), (ids, mask), torch.tensor([0.0, 0.0]), "mean")
    assert apart.item() == pytest.approx(1.0, abs=1e-4), "cosine 1 where 0 was asked: error 1"


@pytest.mark.heavy
def test_a_frozen_run_reads_with_the_tuned_backbone_and_saves_it(tiny_recipe, tiny_backbone_dir, monkeypatch):
    # The backbone named as a hub model would be: a frozen model folder names it instead of saving its weights,
    # unless the weights are no longer that model's, as here.
    monkeypatch.setattr(folder, "portable_reference", lambda name: name)
    recipe = longbert.load_recipe(None, tiny_recipe + CONTRASTIVE + ["model.finetune=frozen",
                                                                   "train.frozen_head_epochs=2"])
    metrics = longbert.train(recipe).metrics
    run = Path(recipe.output_dir)
    stage = metrics["contrastive_stage"]
    assert stage["pairs"] == 24 and stage["steps"] == 3, "24 pairs in batches of 8"
    assert metrics["train_seconds"] > stage["train_seconds"] > 0
    assert metrics["init_from"]["path"] == str(run / "contrastive_stage")
    assert metrics["validation_history"][0]["step"] > 0, "the stage's untrained head is no candidate at step 0"

    original = load_file(Path(tiny_backbone_dir) / "model.safetensors")
    tuned = load_file(run / "contrastive_stage" / "backbone" / "model.safetensors")
    kept = load_file(run / "best" / "backbone" / "model.safetensors")
    name = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(original[name], tuned[name]), "the stage moved the backbone"
    assert all(torch.equal(tuned[k], kept[k]) for k in tuned), "the frozen run kept the tuned backbone as it was"
    assert json.loads((run / "best" / "longbert_config.json").read_text())["backbone"] == "backbone/"

    # The saved folder, loaded again, reads with the tuned backbone.
    model = longbert.LongDocumentClassifier.from_pretrained(run / "best")
    assert torch.equal(model.backbone.state_dict()[name], tuned[name])


@pytest.mark.heavy
def test_a_stop_in_the_stage_keeps_nothing_and_a_resumed_run_does_not_tune_again(tiny_recipe):
    recipe = longbert.load_recipe(None, tiny_recipe + CONTRASTIVE + ["train.epochs=1"])
    stage = Path(recipe.output_dir) / "contrastive_stage"
    with pytest.raises(TrainingInterrupted, match="contrastive stage stopped"):
        longbert.train(recipe, stop=StopAfterSteps(2))  # in the stage's 3 steps
    assert not Path(recipe.output_dir).exists(), "nothing half-written is left"
    with pytest.raises(TrainingInterrupted):
        longbert.train(recipe, stop=StopAfterSteps(3 + 2))  # the stage again, then 2 main steps
    written = (stage / "contrastive.json").stat().st_mtime_ns
    metrics = longbert.train(recipe, resume=True).metrics
    assert (stage / "contrastive.json").stat().st_mtime_ns == written, "the finished stage is not tuned again"
    assert metrics["contrastive_stage"]["steps"] == 3 and metrics["steps"] == 6


@pytest.mark.parametrize("setting, message", [
    ("train.contrastive_pairs=-2", "train.contrastive_pairs must be >= 0"),
    ("train.contrastive_window=0", "train.contrastive_window must be >= 1"),
    ("train.contrastive_max_pairs=0", "train.contrastive_max_pairs must be >= 1"),
    ("train.contrastive_learning_rate=0", "train.contrastive_learning_rate must be > 0"),
])
def test_bad_contrastive_settings_are_named(setting, message):
    with pytest.raises(LongbertError, match=message):
        longbert.load_recipe(None, [setting])


@pytest.mark.heavy
def test_documents_given_in_memory_reach_the_stage(tiny_recipe, imdb_slice):
    import pandas as pd

    data = {split: pd.read_json(imdb_slice / f"{split}.jsonl", lines=True) for split in ("train", "test")}
    recipe = longbert.load_recipe(None, tiny_recipe + CONTRASTIVE + ["data.path=nowhere-at-all", "train.max_steps=2"])
    metrics = longbert.train(recipe, data=data).metrics
    assert metrics["contrastive_stage"]["pairs"] == 24 and metrics["steps"] == 2
