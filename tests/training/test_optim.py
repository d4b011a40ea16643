"""The optimiser's side of both loops: weight decay reaches matrices only (never a bias, a norm's weight or a
strategy's bias table), in the backbone's groups and the head's, as train.weight_decay's help says."""

from __future__ import annotations

import pytest
import torch

import longbert
from helpers import TINY_STRATEGY_SETTINGS, build_model
from longbert.config import load_recipe
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.training import finetune
from longbert.training.optim import decays, param_groups
from longbert.utils.hardware import adamw


@pytest.mark.parametrize("name, shape, decayed", [
    ("backbone.encoder.layer.0.attention.self.query.weight", (4, 4), True),
    ("backbone.embeddings.word_embeddings.weight", (9, 4), True),
    ("strategy.memory", (4, 32), True),  # memory tokens are embeddings: decayed as the word embeddings are
    ("backbone.encoder.layer.0.attention.self.query.bias", (4,), False),
    ("backbone.embeddings.LayerNorm.weight", (4,), False),
    ("backbone.base_model.model.layers.0.input_layernorm.weight", (4,), False),
    ("strategy.pooler.norm.weight", (4,), False),
    ("strategy.distance_bias", (2, 4, 32), False),  # recurrence's bias tables are 3-D, still biases
    ("strategy.memory_bias", (2, 4, 42), False),
    ("strategy.gate", (), False),
    ("head.bias", (2,), False),
])
def test_weight_decay_reaches_matrices_only(name, shape, decayed):
    assert decays(name, torch.zeros(shape)) is decayed


def test_zero_gradient_steps_leave_every_bias_norm_and_strategy_bias_where_it_was(tiny_backbone_dir):
    """With zero gradients AdamW's update is 0, so only weight decay could move a parameter: it must move the
    matrices and nothing else (recurrence's distance bias drifted from -3 towards 0 when decay reached it)."""
    model = build_model(tiny_backbone_dir, "recurrence", ["strategy.pooling=attention"]).train()
    cfg = load_recipe(None, ["train.weight_decay=0.1", "train.head_learning_rate=1e-2"]).train
    optimizer = adamw(param_groups(model, cfg, is_backbone=lambda name: name.startswith("backbone.")))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for _ in range(20):
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    kept = {n for n, _ in model.named_parameters()} - moved
    assert {"strategy.distance_bias", "strategy.pooler.project.bias", "head.bias",
            "backbone.embeddings.LayerNorm.weight", "backbone.embeddings.LayerNorm.bias"} <= kept
    assert {"head.weight", "strategy.pooler.project.weight", "backbone.embeddings.word_embeddings.weight"} <= moved
    assert all(not decays(n, p) for n, p in model.named_parameters() if n in kept)


def test_the_loop_gives_no_decay_to_biases_and_norms_of_the_backbone_and_the_head(tiny_recipe, monkeypatch):
    built, optimizers = [], []
    from_recipe = LongDocumentClassifier.from_recipe
    monkeypatch.setattr(LongDocumentClassifier, "from_recipe",
                        classmethod(lambda cls, *a, **k: built.append(from_recipe(*a, **k)) or built[-1]))
    real_adamw = finetune.adamw
    monkeypatch.setattr(finetune, "adamw",
                        lambda groups: optimizers.append(real_adamw(groups)) or optimizers[-1])
    overrides = [o for o in tiny_recipe if not o.startswith("strategy.")] + [
        "strategy.name=recurrence", *TINY_STRATEGY_SETTINGS["recurrence"], "strategy.pooling=attention",
        "train.max_steps=1"]
    longbert.train(longbert.load_recipe(None, overrides))
    names = {id(p): n for n, p in built[0].named_parameters()}
    decay = {names[id(p)]: group["weight_decay"] > 0 for group in optimizers[0].param_groups for p in group["params"]}
    assert decay == {n: decays(n, p) for n, p in built[0].named_parameters() if p.requires_grad}
    assert not any(decay[n] for n in ("head.bias", "strategy.distance_bias", "strategy.pooler.project.bias",
                                      "backbone.embeddings.LayerNorm.weight"))
    assert decay["head.weight"] and decay["backbone.embeddings.word_embeddings.weight"]


def test_layer_decay_gives_each_backbone_layer_its_own_learning_rate(tiny_backbone_dir):
    """train.layer_decay 0.5 on a 2-layer backbone: top layer at learning_rate, the one below at half, the embeddings
    at a quarter; the head keeps head_learning_rate, and 1.0 keeps the four groups there were before."""
    model = build_model(tiny_backbone_dir, "truncate", [])
    lr_of = {}
    cfg = load_recipe(None, ["train.learning_rate=1.0", "train.head_learning_rate=7.0", "train.layer_decay=0.5"]).train
    for group in param_groups(model, cfg):
        for p in group["params"]:
            lr_of[id(p)] = (group["lr"], group["weight_decay"] > 0)
    named = dict(model.named_parameters())
    layers = model.backbone.config.num_hidden_layers
    assert layers == 2
    assert lr_of[id(named["backbone.encoder.layer.1.attention.self.query.weight"])] == (1.0, True)
    assert lr_of[id(named["backbone.encoder.layer.0.attention.self.query.weight"])] == (0.5, True)
    assert lr_of[id(named["backbone.encoder.layer.0.attention.self.query.bias"])] == (0.5, False)
    assert lr_of[id(named["backbone.embeddings.word_embeddings.weight"])] == (0.25, True)
    assert lr_of[id(named["head.weight"])] == (7.0, True)
    plain = param_groups(model, load_recipe(None, ["train.learning_rate=1.0", "train.head_learning_rate=7.0"]).train)
    assert [(g["lr"], g["backbone"], g["weight_decay"] > 0) for g in plain] == [
        (1.0, True, True), (1.0, True, False), (7.0, False, True), (7.0, False, False)]


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_layer_decay_out_of_range_is_one_line(value):
    with pytest.raises(longbert.LongbertError, match=rf"train.layer_decay must be in \(0, 1\], got {value}"):
        load_recipe(None, [f"train.layer_decay={value}"])
