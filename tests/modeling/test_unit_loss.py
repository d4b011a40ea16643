"""Unit-level supervision (train.unit_loss_weight): every unit classified by the head on its own learns its
document's label. Equivalences: over one unit it is the document loss; padding units never count; a document weighs
the same however many units it has."""

from __future__ import annotations

import json

import pytest
import torch

import longbert
from helpers import build_model, random_documents
from longbert.strategies.base import Units


def unit_batch(seed=0):
    generator = torch.Generator().manual_seed(seed)
    vectors = torch.randn(3, 4, 32, generator=generator)  # (B, N, H)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.bool)  # 4, 1 and 2 units
    return Units(vectors, mask)


@pytest.mark.parametrize("problem", ["single_label", "multi_label"])
def test_over_one_unit_it_is_the_document_loss(tiny_backbone_dir, problem):
    model = build_model(tiny_backbone_dir, "chunk", [f"model.problem_type={problem}", "strategy.pooling=attention"])
    units = unit_batch()
    one = Units(units.vectors[:, :1], units.mask[:, :1])
    labels = torch.tensor([0, 1, 1]) if problem == "single_label" else torch.tensor([[1.0, 0.0], [1, 1], [0, 1]])
    weights = torch.tensor([1.0, 3.0])
    for class_weights in (None, weights):
        document = model.loss(model(units=one).logits, labels, class_weights)
        if class_weights is None or problem == "multi_label":  # a weighted mean over one unit each is the same mean
            torch.testing.assert_close(model.unit_loss(one, labels, class_weights), document)


def test_it_is_the_mean_over_documents_of_each_documents_mean_over_its_units(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    units, labels = unit_batch(), torch.tensor([0, 1, 1])
    by_hand = []
    for b, label in enumerate(labels):
        logits = model.head(units.vectors[b][units.mask[b]])  # (N_b, C)
        by_hand.append(torch.nn.functional.cross_entropy(logits, label.repeat(logits.shape[0])))
    torch.testing.assert_close(model.unit_loss(units, labels), torch.stack(by_hand).mean())
    # What padding units hold never counts.
    noisy = Units(units.vectors.masked_fill(~units.mask.unsqueeze(-1), 1e3), units.mask)
    torch.testing.assert_close(model.unit_loss(noisy, labels), model.unit_loss(units, labels))


def test_gradients_reach_the_backbone_through_every_unit(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.pooling=attention"])
    output = model(random_documents([130, 60]))
    model.unit_loss(output.units, torch.tensor([0, 1])).backward()
    assert model.backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.strategy.pooler.score.weight.grad is None, "the unit loss does not go through the pooler"


@pytest.mark.heavy
def test_a_run_trains_with_it_and_records_it(tiny_recipe, tmp_path):
    settings = tiny_recipe + ["train.max_steps=3", "strategy.pooling=attention", "data.test_split=null"]
    plain = longbert.train(longbert.load_recipe(None, settings + [f"output_dir={tmp_path / 'plain'}"]))
    recipe = longbert.load_recipe(None, settings + [f"output_dir={tmp_path / 'units'}", "train.unit_loss_weight=0.5"])
    units = longbert.train(recipe)
    assert longbert.load_recipe(units.folder / "recipe.yaml").train.unit_loss_weight == 0.5
    first = [json.loads((r.folder / "metrics.json").read_text())["train_log"][0]["loss"] for r in (plain, units)]
    assert first[1] > first[0], "the unit loss is added to the document's"


def test_a_negative_weight_is_refused():
    with pytest.raises(longbert.LongbertError, match=r"train.unit_loss_weight must be >= 0, got -1"):
        longbert.load_recipe(None, ["data.path=x", "train.unit_loss_weight=-1"])
