"""train.reading: gradient through the units that matter, the rest from a cache; lower layers frozen and cached
(longbert.training.selective)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import longbert
from helpers import StopAfterSteps, assert_same_run, build_model, random_documents
from longbert.config import load_recipe
from longbert.config.train_reading import ReadingConfig
from longbert.errors import LongbertError
from longbert.strategies.base import Pooled
from longbert.training.selective import UnitReader, document_key
from longbert.training.stopping import TrainingInterrupted

LENGTHS = [300, 90, 41]  # 8, 3 and 2 chunks of 40 tokens


def reader(model, lengths=LENGTHS, dtype=torch.float32, **settings) -> UnitReader:
    return UnitReader(model, ReadingConfig(**settings), lengths, dtype)


@pytest.mark.parametrize("strategy", ["chunk", "sliding", "truncate"])
def test_the_layers_above_cached_lower_states_give_what_the_whole_backbone_gives(tiny_backbone_dir, strategy):
    model = build_model(tiny_backbone_dir, strategy, ["strategy.pooling=vote"] if strategy != "truncate" else [])
    documents = random_documents(LENGTHS)
    with torch.no_grad():
        whole = model.encode(documents)
        read = reader(model, frozen_layers=1)(model, documents)
    assert torch.equal(read.mask, whole.mask)
    torch.testing.assert_close(read.vectors, whole.vectors, rtol=1e-5, atol=1e-5)


def test_frozen_layers_stop_the_embeddings_and_the_layers_below_from_training(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    reader(model, frozen_layers=1)
    frozen = {n for n, p in model.backbone.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(("embeddings.", "encoder.layer.0.")) for n in frozen)
    assert all(p.requires_grad for n, p in model.backbone.named_parameters() if n.startswith("encoder.layer.1."))


def test_only_the_chosen_units_carry_gradient_and_the_cache_takes_their_fresh_vectors(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=vote"]).train()
    documents = random_documents(LENGTHS)
    units_reader = reader(model, grad_units=1, random_units=0)
    # The pooler's weights favour the third unit of every document: it is the one read with gradient.
    real_pool = model.strategy.pool

    def pool(units):
        weights = torch.zeros(units.mask.shape)
        weights[:, 2 if units.mask.shape[1] > 2 else 0] = 1.0
        return Pooled(real_pool(units).vector, weights)

    model.strategy.pool = pool
    units = units_reader(model, documents)
    model.strategy.pool = real_pool
    with torch.no_grad():
        whole = model.eval().encode(documents)
    torch.testing.assert_close(units.vectors, whole.vectors)  # the cache was filled by these very weights
    chosen = {(0, 2), (1, 2), (2, 0)}
    embeddings = model.backbone.embeddings.word_embeddings.weight
    for b in range(3):
        for j in range(int(units.mask[b].sum())):
            grad = torch.autograd.grad(units.vectors[b, j].pow(2).sum(), embeddings, retain_graph=True,
                                       allow_unused=True)[0]
            assert (grad is not None and grad.abs().sum() > 0) == ((b, j) in chosen), (b, j)
    # tokens: 8+3+2 windows read once without gradient; a 40-, a 10- and a 40-token window with it
    assert units_reader.counts == {"tokens_with_gradient": 90, "tokens_without_gradient": 431,
                                   "tokens_from_cache": 431 - 90, "tokens_below_frozen_layers": 0}
    with torch.no_grad():  # a cached vector moves when its unit is read with gradient, and only then
        for p in model.backbone.parameters():
            p.add_(0.01)
    units_reader(model.train(), documents)
    key = document_key(documents[1])
    with torch.no_grad():
        moved = model.eval().encode(documents[1:2]).vectors[0]
    changed = [not torch.allclose(units_reader.vectors[key][j], moved[j].float()) for j in range(3)]
    assert sum(changed) == 2  # the unit read again holds its new vector; the two others still the old ones


def test_a_document_of_no_more_units_than_grad_units_is_read_as_the_model_reads(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=vote"])
    documents = random_documents(LENGTHS)
    units = reader(model, grad_units=8)(model, documents)
    torch.testing.assert_close(units.vectors, model.encode(documents).vectors, rtol=0, atol=0)


def test_a_document_of_no_more_units_than_are_read_with_gradient_is_read_whole_beside_longer_ones(
        tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=vote"])
    documents = random_documents([320, 41])  # 8 chunks of 40, and 2: the top one and one drawn would be both
    units_reader = reader(model, [320, 41], grad_units=1, random_units=1)
    units = units_reader(model, documents)
    assert units_reader.counts["tokens_without_gradient"] == 320  # the long document's cache, filled
    assert units_reader.counts["tokens_with_gradient"] == 2 * 40 + 41  # two of its units, and all of the short one
    assert document_key(documents[1]) not in units_reader.vectors
    torch.testing.assert_close(units.vectors[1, :2], model.encode(documents[1:]).vectors[0, :2])


def test_the_cache_is_read_anew_every_refresh_epochs_once(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=vote"])
    units_reader = reader(model, grad_units=1, random_units=0, refresh_epochs=2)
    units_reader(model, random_documents(LENGTHS))
    units_reader.start_epoch(1)
    assert len(units_reader.vectors) == 3
    units_reader.start_epoch(2)
    assert not units_reader.vectors
    units_reader(model, random_documents(LENGTHS))
    units_reader.start_epoch(2)  # a resumed run starting epoch 2 again keeps what epoch 2 has read
    assert len(units_reader.vectors) == 3


@pytest.mark.parametrize(("strategy", "extra", "said"), [
    ("bigbird", [], "does not read its units as independent windows"),
    ("recurrence", [], "does not read its units as independent windows"),
    ("chunk", ["strategy.pooling=mean"], "needs a pooling whose weights follow what the units hold"),
    ("chunk", ["strategy.pooling=transformer"], "pools with transformer"),
    ("truncate", [], "reads one unit a document: train.reading.grad_units has nothing to choose among"),
])
def test_a_strategy_it_does_not_apply_to_reads_every_unit_and_says_why(tiny_backbone_dir, strategy, extra, said,
                                                                       caplog):
    model = build_model(tiny_backbone_dir, strategy, extra)
    documents = random_documents([100, 60])
    with caplog.at_level(logging.INFO, logger="longbert"):
        units_reader = reader(model, [100, 60], grad_units=1)
    assert said in caplog.text and said in units_reader.record()["not_applied"]
    torch.testing.assert_close(units_reader(model, documents).vectors, model.encode(documents).vectors)


def test_settings_out_of_range_are_refused_in_one_line():
    with pytest.raises(LongbertError) as e:
        load_recipe(None, ["train.reading.grad_units=0", "train.reading.random_units=-1",
                           "train.reading.max_cache_gb=0"])
    said = str(e.value)
    assert "train.reading.grad_units must be >= 1 or null, got 0" in said and "random_units must be >= 0" in said
    assert "max_cache_gb must be > 0" in said and "\n" not in said
    with pytest.raises(LongbertError, match="model.finetune frozen has no such stage"):
        load_recipe(None, ["train.reading.frozen_layers=1", "model.finetune=frozen"])


def test_frozen_layers_that_leave_no_layer_to_train_are_refused(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    with pytest.raises(LongbertError, match="must leave a layer to train: the backbone has 2 layers, got 2"):
        reader(model, frozen_layers=2)


@pytest.mark.parametrize("settings, refusal", [
    (["train.reading.frozen_layers=100"], "must leave a layer to train: the backbone has 2 layers, got 100"),
    (["train.reading.frozen_layers=1", "train.reading.max_cache_gb=1e-9"],
     r"the training documents need 0.00\d+ GB, more than train.reading.max_cache_gb \(1e-09\)"),
], ids=["frozen_layers", "max_cache_gb"])
def test_reading_the_end_to_end_stage_cannot_do_is_refused_before_the_head_stage(tiny_recipe, monkeypatch, settings,
                                                                                 refusal):
    import longbert.training.trainer as trainer

    monkeypatch.setattr(trainer, "cache_splits", lambda *a, **k: pytest.fail("the head stage started"))
    recipe = load_recipe(None, [*tiny_recipe, "train.head_first=true", *settings])
    with pytest.raises(LongbertError, match=refusal):
        longbert.train(recipe)
    assert not Path(recipe.output_dir).exists(), "nothing left behind"


def test_a_cache_of_lower_states_larger_than_allowed_is_refused_with_its_size(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    with pytest.raises(LongbertError) as e:
        reader(model, [100_000] * 10, dtype=torch.bfloat16, frozen_layers=1, max_cache_gb=0.001)
    said = str(e.value)
    # 2,500 windows of 40 tokens a document, each with [CLS] and [SEP]: 1,050,000 tokens of 64 bytes
    assert "caches 64 bytes a token" in said and "need 0.0672 GB" in said and "max_cache_gb (0.001)" in said
    assert all(p.requires_grad for p in model.backbone.parameters())  # refused before anything was frozen


def reading_recipe(tiny_recipe, *extra):
    return [*tiny_recipe, "strategy.pooling=vote", "data.max_document_tokens=300", *extra]


@pytest.mark.heavy
def test_grad_units_at_least_every_unit_trains_exactly_as_without(tiny_recipe, tmp_path):
    import longbert

    plain = longbert.load_recipe(None, reading_recipe(tiny_recipe, f"output_dir={tmp_path / 'plain'}"))
    every = longbert.load_recipe(None, reading_recipe(tiny_recipe, f"output_dir={tmp_path / 'every'}",
                                                      "train.reading.grad_units=8"))  # 300 tokens: 5 chunks
    longbert.train(plain)
    longbert.train(every)
    assert_same_run(tmp_path / "plain", tmp_path / "every")
    reading = json.loads((tmp_path / "every" / "metrics.json").read_text())["reading"]
    assert reading["grad_units"] == 8 and reading["tokens_from_cache"] == 0 and reading["seconds"] > 0
    plain_reading = json.loads((tmp_path / "plain" / "metrics.json").read_text())["reading"]
    assert plain_reading["tokens_with_gradient"] == reading["tokens_with_gradient"] > 0


@pytest.mark.heavy
def test_a_selective_run_stopped_and_resumed_ends_as_one_that_was_not(tiny_recipe, tmp_path):
    import longbert

    settings = ("train.reading.grad_units=1", "train.reading.random_units=1", "train.reading.frozen_layers=1",
                "train.reading.refresh_epochs=1")
    whole = longbert.load_recipe(None, reading_recipe(tiny_recipe, *settings, f"output_dir={tmp_path / 'whole'}"))
    longbert.train(whole)
    parts = longbert.load_recipe(None, reading_recipe(tiny_recipe, *settings, f"output_dir={tmp_path / 'parts'}"))
    with pytest.raises(TrainingInterrupted):
        longbert.train(parts, stop=StopAfterSteps(4))
    assert "unit.0" not in load_file(tmp_path / "parts" / "checkpoint" / "reading.safetensors")  # keyed by hash
    assert len(load_file(tmp_path / "parts" / "checkpoint" / "reading.safetensors")) > 4
    longbert.train(parts, resume=True)
    assert_same_run(tmp_path / "whole", tmp_path / "parts")
    reading = json.loads((Path(tmp_path / "whole") / "metrics.json").read_text())["reading"]
    assert reading["tokens_from_cache"] > 0 and reading["frozen_layers"] == 1
    resumed = json.loads((tmp_path / "parts" / "metrics.json").read_text())["reading"]
    # the lower-layer states are not in the checkpoint: a resumed run computes them again (to the bit, above)
    assert resumed["tokens_below_frozen_layers"] > reading["tokens_below_frozen_layers"] > 0
    again = ("seconds", "tokens_below_frozen_layers")
    assert {k: v for k, v in resumed.items() if k not in again} == {k: v for k, v in reading.items() if k not in again}


@pytest.mark.slow  # CI runs the same resume without a head stage (above); this adds the stage before it
def test_a_run_with_a_head_stage_stopped_and_resumed_ends_as_one_that_was_not(tiny_recipe, tmp_path):
    import longbert

    settings = ("train.head_first=true", "train.frozen_head_epochs=1", "train.reading.grad_units=1",
                "train.reading.random_units=1")
    whole = longbert.load_recipe(None, reading_recipe(tiny_recipe, *settings, f"output_dir={tmp_path / 'whole'}"))
    longbert.train(whole)
    head_steps = json.loads((tmp_path / "whole" / "metrics.json").read_text())["head_stage"]["steps"]
    parts = longbert.load_recipe(None, reading_recipe(tiny_recipe, *settings, f"output_dir={tmp_path / 'parts'}"))
    with pytest.raises(TrainingInterrupted):  # two steps into the end-to-end stage
        longbert.train(parts, stop=StopAfterSteps(head_steps + 2))
    longbert.train(parts, resume=True)
    assert_same_run(tmp_path / "whole", tmp_path / "parts")
    reading = json.loads((tmp_path / "whole" / "metrics.json").read_text())["reading"]
    assert reading["tokens_from_cache"] > 0


def test_the_head_stage_reads_as_a_frozen_run_does(tmp_path):
    from longbert.training.head_stage import head_stage_recipe

    recipe = load_recipe(None, ["train.reading.grad_units=1", "train.reading.frozen_layers=2"])
    head = head_stage_recipe(recipe)
    assert head.model.finetune == "frozen" and head.train.reading == ReadingConfig()
    assert recipe.train.reading.grad_units == 1  # the end-to-end stage keeps its own
