"""The `bigbird` strategy: block-sparse attention equals dense attention when its window covers the sequence,
follows the BigBird pattern otherwise, is unchanged by padding, and is explicit about short documents."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

from helpers import unchecked
from longbert.config import load_recipe
from longbert.errors import LongbertError
from longbert.modeling.backbone import enable_activation_checkpointing
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.strategies.attention import key_padding_mask
from longbert.strategies.base import PassBudget, SpecialTokens
from longbert.strategies.bigbird import (
    BigBirdConfig,
    BigBirdStrategy,
    BlockSparsePlan,
    block_sparse_attention,
    extend_positions,
    fixed_key_blocks,
)

SPECIAL = SpecialTokens(cls_id=101, sep_id=102, pad_id=0)
TINY = dict(max_tokens=256, block_size=16, window_blocks=3, global_blocks=1, random_blocks=2, full_attention_up_to=0,
            token_pooling="cls")


def strategy(budget: PassBudget | None = None, **settings) -> BigBirdStrategy:
    config = BigBirdConfig(**{**TINY, **settings})
    assert not config.problems("strategy"), config.problems("strategy")
    return BigBirdStrategy(config, hidden_size=32, special=SPECIAL, budget=budget or PassBudget())


def documents(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1000, 30000, (n,), generator=generator) for n in lengths]


def dense_reference(backbone, extended_to: int):
    """The same backbone with full (sdpa) attention and the same extended positions."""
    dense = copy.deepcopy(backbone)
    extend_positions(dense, extended_to)
    dense.set_attn_implementation("sdpa")
    return dense


def dense_vectors(backbone, docs, pooling="cls"):
    out = []
    for ids in docs:
        ids = torch.cat([torch.tensor([SPECIAL.cls_id]), ids, torch.tensor([SPECIAL.sep_id])])[None]
        hidden = backbone(input_ids=ids).last_hidden_state[0]  # (L, H)
        out.append(hidden[0] if pooling == "cls" else hidden.mean(0))
    return torch.stack(out)


# -- configuration -----------------------------------------------------------------------------------------


def test_config_problems_name_their_yaml_path():
    problems = unchecked(BigBirdConfig, max_tokens=1000, block_size=64, window_blocks=2, random_blocks=-1,
                             full_attention_up_to=2000, token_pooling="max").problems("strategy")
    text = "; ".join(problems)
    assert "strategy.window_blocks must be odd" in text
    assert "strategy.random_blocks must be >= 0" in text
    assert "strategy.max_tokens must be a multiple of strategy.block_size, got 1000 % 64 = 40" in text
    assert "strategy.full_attention_up_to must be between 0 and strategy.max_tokens" in text
    assert "strategy.token_pooling must be one of" in text
    assert BigBirdConfig().problems("strategy") == []
    with pytest.raises(LongbertError, match="strategy.max_tokens must hold the global blocks"):
        load_recipe(None, ["strategy.name=bigbird", "strategy.max_tokens=64", "strategy.global_blocks=2"])
    recipe = load_recipe(None, ["strategy.name=bigbird", "strategy.block_size=32", "strategy.max_tokens=2048"])
    assert isinstance(recipe.strategy, BigBirdConfig) and recipe.strategy.block_size == 32


# -- positions ---------------------------------------------------------------------------------------------


def test_positions_are_copied_deterministically_and_idempotently(tiny_backbone):
    learned = tiny_backbone.embeddings.position_embeddings.weight.detach().clone()  # (128, H)
    s = strategy()
    s.adapt_backbone(tiny_backbone)
    table = tiny_backbone.embeddings.position_embeddings.weight
    assert table.shape == (256, 32) and tiny_backbone.config.max_position_embeddings == 256
    assert torch.equal(table[:128], learned) and torch.equal(table[128:], learned)
    assert tiny_backbone.embeddings.position_ids.shape == (1, 256)
    assert tiny_backbone.config._attn_implementation == "longbert_block_sparse"
    before = table.detach().clone()
    s.adapt_backbone(tiny_backbone)  # as after loading a saved, already extended backbone
    assert tiny_backbone.embeddings.position_embeddings.weight.shape == (256, 32)
    assert torch.equal(tiny_backbone.embeddings.position_embeddings.weight, before)


def test_roberta_style_positions_keep_their_offset():
    from transformers import RobertaConfig, RobertaModel

    config = RobertaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=66, pad_token_id=1)
    model = RobertaModel(config, add_pooling_layer=False)
    learned = model.embeddings.position_embeddings.weight.detach().clone()  # (66, H): rows 0-1 unused, 2.. learned
    extend_positions(model, 256)
    table = model.embeddings.position_embeddings.weight
    assert table.shape == (258, 32)
    assert torch.equal(table[:66], learned) and torch.equal(table[66:130], learned[2:])
    with torch.no_grad():
        model(input_ids=torch.randint(5, 100, (1, 256)))  # all 256 positions are usable


# -- the attention pattern ---------------------------------------------------------------------------------


def expected_mask(length, real, block, global_blocks, window_blocks):
    """The BigBird pattern as an explicit (L, L) bool matrix, for tiny sizes only."""
    blocks = torch.arange(length) // block
    radius = window_blocks // 2
    near = (blocks[:, None] - blocks[None, :]).abs() <= radius
    is_global = blocks < global_blocks
    allowed = near | is_global[:, None] | is_global[None, :]
    return allowed & (torch.arange(length) < real)[None, :]


def pattern_case(global_blocks: int, window_blocks: int):
    """Two rows (96 and 50 real tokens) of random query/key/value (W, A, L, D), 8-token blocks, and the arguments of a
    BlockSparsePlan for the fixed pattern but its bias."""
    torch.manual_seed(0)
    rows, heads, length, size, block = 2, 3, 96, 8, 8
    real = [96, 50]
    query, key, value = (torch.randn(rows, heads, length, size) for _ in range(3))
    token_mask = torch.arange(length)[None] < torch.tensor(real)[:, None]  # (W, L)
    blocks, valid = fixed_key_blocks(length // block, global_blocks, window_blocks)
    plan = (block, global_blocks, token_mask, blocks[None, None], valid[None, None])
    return (query, key, value), plan, real


@pytest.mark.parametrize("global_blocks,window_blocks", [(1, 3), (2, 1), (2, 5), (1, 15)])
def test_block_sparse_attention_follows_the_bigbird_pattern(global_blocks, window_blocks):
    (query, key, value), arguments, real = pattern_case(global_blocks, window_blocks)
    rows, heads, length, size = query.shape
    block = arguments[0]
    plan = BlockSparsePlan(*arguments)
    module = torch.nn.Module().eval()
    out = block_sparse_attention(module, query, key, value, plan, scaling=size**-0.5)
    for row in range(rows):
        mask = expected_mask(length, real[row], block, global_blocks, window_blocks)  # (L, L)
        want = torch.nn.functional.scaled_dot_product_attention(query[row], key[row], value[row], attn_mask=mask)
        torch.testing.assert_close(out[row].transpose(0, 1), want, atol=1e-5, rtol=1e-4)


def test_global_tokens_see_every_block_and_local_ones_do_not():
    torch.manual_seed(0)
    length, block = 128, 16
    query, key, value = (torch.randn(1, 2, length, 8) for _ in range(3))
    value.requires_grad_(True)
    blocks, valid = fixed_key_blocks(length // block, 1, 3)
    plan = BlockSparsePlan(block, 1, torch.ones(1, length, dtype=torch.bool), blocks[None, None], valid[None, None])
    out = block_sparse_attention(torch.nn.Module().eval(), query, key, value, plan)
    (grad_cls,) = torch.autograd.grad(out[0, 0].sum(), value, retain_graph=True)  # [CLS]: a global token
    read_by_cls = grad_cls[0].abs().sum((0, 2)).view(-1, block).sum(1)  # (G,)
    assert (read_by_cls > 0).all(), "the global [CLS] reads every block"
    (grad_mid,) = torch.autograd.grad(out[0, 4 * block].sum(), value)  # a token in block 4
    read_by_mid = grad_mid[0].abs().sum((0, 2)).view(-1, block).sum(1)  # (G,)
    assert read_by_mid.nonzero().flatten().tolist() == [0, 3, 4, 5], "global block + its window, nothing else"


@pytest.mark.parametrize("global_blocks,window_blocks,bias", [(1, 3, -2.0), (2, 1, 1.5), (2, 5, 0.0)])
def test_a_global_bias_is_added_to_every_score_between_global_and_other_tokens(global_blocks, window_blocks, bias):
    """Equal to dense attention over the BigBird pattern with `bias` (a different one per head) added where one side
    is global and the other is not; 0 equals no bias."""
    (query, key, value), arguments, real = pattern_case(global_blocks, window_blocks)
    rows, heads, length, size = query.shape
    block = arguments[0]
    per_head = bias + torch.tensor([0.0, -1.0, 0.5])  # (A,)
    plan = BlockSparsePlan(*arguments, per_head[None])
    out = block_sparse_attention(torch.nn.Module().eval(), query, key, value, plan, scaling=size**-0.5)
    is_global = torch.arange(length) // block < global_blocks  # (L,)
    across = (is_global[:, None] != is_global[None, :]).float()  # (L, L)
    for row in range(rows):
        allowed = expected_mask(length, real[row], block, global_blocks, window_blocks)  # (L, L)
        scores = (per_head[:, None, None] * across).masked_fill(~allowed, float("-inf"))  # (A, L, L)
        want = torch.nn.functional.scaled_dot_product_attention(query[row], key[row], value[row], attn_mask=scores)
        torch.testing.assert_close(out[row].transpose(0, 1), want, atol=1e-5, rtol=1e-4)
    if bias == 0.0:
        unbiased = block_sparse_attention(torch.nn.Module().eval(), query, key, value, BlockSparsePlan(*arguments),
                                          scaling=size**-0.5)
        zero = BlockSparsePlan(*arguments, torch.zeros(1, heads))
        torch.testing.assert_close(block_sparse_attention(torch.nn.Module().eval(), query, key, value, zero,
                                                          scaling=size**-0.5), unbiased)


def test_a_very_negative_global_bias_keeps_the_other_tokens_apart_from_the_global_ones(tiny_backbone):
    """With the bias far below zero, no token outside the global blocks reads them (nor the reverse): changing the
    global tokens leaves every other token's state as it was. Without it, every token moves."""
    docs = documents([250], seed=8)
    changed = [docs[0].clone()]
    changed[0][:20] = 1000  # the first 20 content tokens lie in the global block (16 tokens a block, [CLS] first)
    states = {}
    for bias in (None, -1e4):
        s = strategy(window_blocks=3, global_blocks=2, random_blocks=0, global_bias=bias)
        backbone = copy.deepcopy(tiny_backbone)
        s.adapt_backbone(backbone)
        with torch.no_grad():
            states[bias] = [s.encode_tokens(backbone, d)[0] for d in (docs, changed)]  # (T, H) each
    later = slice(2 * 16 - 1, None)  # content tokens outside the two global blocks
    torch.testing.assert_close(states[-1e4][0][later], states[-1e4][1][later])
    assert not torch.allclose(states[None][0][later][-50:], states[None][1][later][-50:], atol=1e-3)


def test_the_global_bias_is_a_weight_per_layer_and_head_that_trains_and_is_saved(tiny_backbone_dir, tmp_path):
    recipe = load_recipe(None, [f"backbone.name={tiny_backbone_dir}", "strategy.name=bigbird",
                                *(f"strategy.{k}={v}" for k, v in {**TINY, "unit_tokens": 32, "pooling": "attention",
                                                                    "global_bias": -3}.items())])
    assert recipe.strategy.global_bias == -3.0
    torch.manual_seed(0)
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
    bias = model.strategy.global_bias
    layers, heads = model.backbone.config.num_hidden_layers, model.backbone.config.num_attention_heads
    assert tuple(bias.shape) == (layers, heads) and torch.equal(bias.detach(), torch.full((layers, heads), -3.0))
    docs = documents([250, 90])
    model(docs).logits.sum().backward()
    assert bias.grad is not None and bias.grad.abs().sum() > 0
    with torch.no_grad():
        bias.add_(torch.randn_like(bias))
    model.eval()
    with torch.no_grad():
        want = model(docs).logits
    model.save_pretrained(tmp_path / "model")
    loaded = LongDocumentClassifier.from_pretrained(tmp_path / "model")
    torch.testing.assert_close(loaded.strategy.global_bias, bias)
    with torch.no_grad():
        torch.testing.assert_close(loaded(docs).logits, want, atol=1e-5, rtol=1e-4)
    assert unchecked(BigBirdConfig, global_bias=float("inf")).problems("strategy") == [
        "strategy.global_bias must be a finite number or null, got inf"]
    assert build_classifier(tiny_backbone_dir, "full").strategy.global_bias is None, "no bias unless asked for"


def test_padding_mask_is_never_square():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert key_padding_mask(2, 4, 4, attention_mask=mask).shape == (2, 1, 1, 4)
    assert key_padding_mask(2, 4, 4, attention_mask=torch.ones(2, 4, dtype=torch.bool)) is None


# -- equivalences on the backbone --------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_a_window_covering_the_sequence_equals_dense_attention(tiny_backbone, pooling):
    """Lengths past the backbone's 128 learned positions; a batch mixing short and long documents."""
    s = strategy(window_blocks=31, random_blocks=0, token_pooling=pooling)
    dense = dense_reference(tiny_backbone, 256)
    s.adapt_backbone(tiny_backbone)
    docs = documents([250, 37, 130, 1])
    with torch.no_grad():
        sparse = s.encode(tiny_backbone, docs).vectors[:, 0]  # (B, H)
        want = dense_vectors(dense, docs, pooling)
    torch.testing.assert_close(sparse, want, atol=1e-5, rtol=1e-4)


def test_padding_does_not_change_a_block_sparse_document(tiny_backbone):
    """A narrow window (really sparse), documents not a block multiple, alone / batched / in bounded passes."""
    s = strategy(window_blocks=1, global_blocks=2)
    s.adapt_backbone(tiny_backbone)
    short, long, medium = documents([45, 254, 100], seed=1)
    with torch.no_grad():
        alone = s.encode(tiny_backbone, [short]).vectors[0]
        mixed = s.encode(tiny_backbone, [long, short, medium]).vectors
        long_alone = s.encode(tiny_backbone, [long]).vectors[0]
        bounded = strategy(PassBudget(max_windows=1), window_blocks=1, global_blocks=2).encode(
            tiny_backbone, [long, short, medium]).vectors
    torch.testing.assert_close(mixed[1], alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[0], long_alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(bounded, mixed, atol=1e-5, rtol=1e-4)


def test_documents_longer_than_max_tokens_keep_their_head(tiny_backbone):
    s = strategy()
    s.adapt_backbone(tiny_backbone)
    (doc,) = documents([600])
    with torch.no_grad():
        torch.testing.assert_close(s.encode(tiny_backbone, [doc]).vectors, s.encode(tiny_backbone, [doc[:254]]).vectors)


# -- the short-document rule -------------------------------------------------------------------------------


def test_short_document_rule_both_ways_and_never_sticky(tiny_backbone):
    """Up to full_attention_up_to tokens (with [CLS]/[SEP]): full attention, equal to the dense backbone.
    Longer: block-sparse, equal to the always-sparse strategy and not to dense. Decided per document, per call.
    (Token means: the global [CLS] reads everything, so its state moves less between the two.)"""
    rule = strategy(window_blocks=1, full_attention_up_to=64, token_pooling="mean")
    always_sparse = strategy(window_blocks=1, full_attention_up_to=0, token_pooling="mean")
    dense = dense_reference(tiny_backbone, 256)
    rule.adapt_backbone(tiny_backbone)
    fits, just_over, long = documents([62, 63, 200], seed=2)  # 64 and 65 tokens with [CLS]/[SEP]
    assert rule.uses_full_attention(64) and not rule.uses_full_attention(65)
    with torch.no_grad():
        want_dense = dense_vectors(dense, [fits, just_over, long], "mean")
        want_sparse = always_sparse.encode(tiny_backbone, [fits, just_over, long]).vectors[:, 0]
        first = rule.encode(tiny_backbone, [long]).vectors[0, 0]
        short_then = rule.encode(tiny_backbone, [fits]).vectors[0, 0]  # a short call in between...
        again = rule.encode(tiny_backbone, [long]).vectors[0, 0]  # ...does not switch the long one to full
        mixed = rule.encode(tiny_backbone, [just_over, fits, long]).vectors[:, 0]
    torch.testing.assert_close(short_then, want_dense[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[1], want_dense[0], atol=1e-5, rtol=1e-4)
    for got, i in ((mixed[0], 1), (mixed[2], 2), (first, 2), (again, 2)):
        torch.testing.assert_close(got, want_sparse[i], atol=1e-5, rtol=1e-4)
        assert not torch.allclose(got, want_dense[i], atol=1e-3), "a long document is read block-sparse"


# -- random blocks -----------------------------------------------------------------------------------------


def test_random_blocks_are_seeded_valid_and_off_at_evaluation():
    s = strategy(window_blocks=3, global_blocks=1, random_blocks=2)
    token_mask = torch.arange(256)[None] < torch.tensor([256, 100])[:, None]  # (W, L): 16 and 7 real blocks
    plan = s.plan_pass(token_mask, layers=2, random=True)
    assert plan.key_blocks.shape == (2, 2, 15, 1 + 3 + 2)
    again = strategy(window_blocks=3, global_blocks=1, random_blocks=2).plan_pass(token_mask, 2, random=True)
    assert torch.equal(plan.key_blocks, again.key_blocks), "the same seed draws the same blocks"
    assert not torch.equal(plan.key_blocks[0], plan.key_blocks[1]), "each layer draws its own"
    drawn, ok = plan.key_blocks[..., 4:], plan.key_valid[..., 4:]  # (layers, W, Q, R)
    query = torch.arange(1, 16)[None, None, :, None]
    real_blocks = torch.tensor([16, 7])[None, :, None, None]
    assert ok.any()
    assert ((drawn >= 1) & (drawn < real_blocks) & ((drawn - query).abs() > 1))[ok].all(), \
        "random blocks are non-global, inside the document and outside the window"
    assert not (ok[..., 0] & ok[..., 1] & (drawn[..., 0] == drawn[..., 1])).any(), "no block is read twice"
    evaluation = s.plan_pass(token_mask, layers=2, random=False)
    assert evaluation.key_blocks.shape == (1, 1, 15, 1 + 3)


def test_predictions_are_deterministic_and_training_does_not_leave_random_blocks_on(tiny_backbone):
    s = strategy(window_blocks=1, random_blocks=3, token_pooling="mean")
    s.adapt_backbone(tiny_backbone)
    docs = documents([250, 180], seed=3)
    with torch.no_grad():
        first = s.encode(tiny_backbone, docs).vectors
        tiny_backbone.train()
        trained = s.encode(tiny_backbone, docs).vectors
        tiny_backbone.eval()
        second = s.encode(tiny_backbone, docs).vectors
    assert torch.equal(first, second)
    assert not torch.allclose(first, trained, atol=1e-4), "random blocks are read in training"


# -- training ----------------------------------------------------------------------------------------------


def test_gradients_reach_every_layer_and_the_copied_positions(tiny_backbone):
    s = strategy(random_blocks=2)
    s.adapt_backbone(tiny_backbone)
    tiny_backbone.train()
    loss = s.encode(tiny_backbone, documents([250, 40, 140])).vectors.pow(2).sum()
    loss.backward()
    for name, p in tiny_backbone.named_parameters():
        if "encoder.layer" in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    position_grad = tiny_backbone.embeddings.position_embeddings.weight.grad  # (256, H)
    assert position_grad[200:252].abs().sum() > 0, "positions past the learned 128 are trained"


def test_gradient_checkpointing_replays_the_same_random_blocks(tiny_backbone):
    """Through the API transformers keeps (activation_checkpointing_enable), with no FutureWarning from ours."""
    docs = documents([250, 90], seed=4)
    grads = []
    for checkpointing in (False, True):
        backbone = copy.deepcopy(tiny_backbone)
        s = strategy(random_blocks=3, random_seed=7)
        s.adapt_backbone(backbone)
        if checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("error", FutureWarning)
                enable_activation_checkpointing(backbone)
            # transformers 5.x names it is_activation_checkpointing (the old name warns); 4.x has only the old one
            assert getattr(backbone, "is_activation_checkpointing", None) or backbone.is_gradient_checkpointing
        backbone.train()
        s.encode(backbone, docs).vectors.pow(2).sum().backward()
        grads.append(backbone.encoder.layer[0].attention.self.query.weight.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_bf16_autocast_forward_and_backward(tiny_backbone):
    s = strategy(random_blocks=2)
    s.adapt_backbone(tiny_backbone)
    docs = documents([250, 30, 140], seed=5)
    with torch.no_grad():
        full = s.encode(tiny_backbone, docs).vectors
    tiny_backbone.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        vectors = s.encode(tiny_backbone, docs).vectors
        vectors.float().pow(2).sum().backward()
    assert tiny_backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    tiny_backbone.eval()
    seen = []
    attention = tiny_backbone.encoder.layer[1].attention.self
    hook = attention.register_forward_hook(lambda module, args, out: seen.append(out[0].dtype))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        half = s.encode(tiny_backbone, docs).vectors
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}, "attention ran in bf16"
    torch.testing.assert_close(half.float(), full, atol=0.1, rtol=0.05)


# -- the whole model: LoRA, saving and loading -------------------------------------------------------------


def build_classifier(backbone_dir, finetune: str) -> LongDocumentClassifier:
    settings = ["max_tokens=256", "block_size=16", "window_blocks=3", "global_blocks=1", "random_blocks=1",
                "full_attention_up_to=64"]
    recipe = load_recipe(None, [f"backbone.name={backbone_dir}", "strategy.name=bigbird", f"model.finetune={finetune}",
                                *(f"strategy.{s}" for s in settings)])
    torch.manual_seed(0)
    return LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_save_and_load_give_identical_predictions(tiny_backbone_dir, tmp_path, finetune):
    model = build_classifier(tiny_backbone_dir, finetune)
    with torch.no_grad():  # stand-in for fine-tuning: the trainable weights, copied positions included, move
        for p in model.backbone.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    model.eval()
    docs = documents([250, 30, 140], seed=6)
    with torch.no_grad():
        want = model(docs).logits
    model.save_pretrained(tmp_path / "model")
    loaded = LongDocumentClassifier.from_pretrained(tmp_path / "model")
    with torch.no_grad():
        got = loaded(docs).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    base = loaded.backbone.get_base_model() if finetune == "lora" else loaded.backbone
    assert base.embeddings.position_embeddings.weight.shape[0] == 256
    if finetune == "full":
        import json

        saved = json.loads((tmp_path / "model" / "backbone" / "config.json").read_text())
        assert saved["max_position_embeddings"] == 256
        assert "longbert_block_sparse" not in json.dumps(saved), "the saved backbone loads without longbert"


def test_interpolated_positions_walk_the_learned_table_once(tiny_backbone):
    learned = tiny_backbone.embeddings.position_embeddings.weight.detach().clone()  # (128, H)
    strategy(position_scheme="interpolate").adapt_backbone(tiny_backbone)
    table = tiny_backbone.embeddings.position_embeddings.weight.detach()  # (256, H)
    assert table.shape == (256, 32)
    assert torch.equal(table[:128], learned)  # short documents read exactly as before
    new = table[128:]  # 128 new positions over the 128 learned rows
    torch.testing.assert_close(new[0], learned[0]) and torch.testing.assert_close(new[-1], learned[-1])
    # Position 128 + j sits at fractional row j * 127 / 127 = j here: each lies between its two nearest rows.
    where = torch.linspace(0, 127, 128)
    for j in (1, 40, 77, 126):
        low, share = int(where[j]), float(where[j] - int(where[j]))
        torch.testing.assert_close(new[j], learned[low] * (1 - share) + learned[min(low + 1, 127)] * share)
    assert len({tuple(row.tolist()) for row in new}) == 128, "no two new positions share a vector"
    problems = unchecked(BigBirdConfig, position_scheme="stretch").problems("strategy")
    assert problems == ["strategy.position_scheme must be one of copy, interpolate, got 'stretch'"]


def test_under_lora_the_extended_positions_train_and_are_saved_with_the_adapter(tiny_backbone_dir, tmp_path):
    model = build_classifier(tiny_backbone_dir, "lora")
    trainable = {n for n, p in model.backbone.named_parameters() if p.requires_grad}
    assert any("position_embeddings" in n for n in trainable) and any("lora_" in n for n in trainable)
    assert not any("word_embeddings" in n for n in trainable)
    model.train()
    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model.loss(model(documents([250, 200], seed=2)).logits, torch.tensor([0, 1])).backward()
    optimiser.step()
    table = model.backbone.get_base_model().embeddings.position_embeddings.weight.detach()
    assert not torch.equal(table[128:], table[:128]), "rows past 128 are no longer copies"
    model.eval()
    docs = documents([250, 30], seed=6)
    with torch.no_grad():
        want = model(docs).logits
    model.save_pretrained(tmp_path / "model")
    loaded = LongDocumentClassifier.from_pretrained(tmp_path / "model")
    with torch.no_grad():
        torch.testing.assert_close(loaded(docs).logits, want, atol=1e-5, rtol=1e-4)


# -- units: spans of the block-sparse token states --------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "gated"])
def test_a_pooler_over_one_unit_gives_todays_document_vector(tiny_backbone, pooling):
    """unit_tokens 0 is today's one unit, and every unit pooler over one unit returns that unit itself."""
    from longbert.strategies.base import Units
    from longbert.strategies.pooling import build_pooler

    s = strategy(token_pooling="mean")
    s.adapt_backbone(tiny_backbone)
    docs = documents([250, 37, 130])
    with torch.no_grad():
        units = s.encode(tiny_backbone, docs)  # (B, 1, H)
        today = s.pool(units).vector
        pooled = build_pooler(pooling, 32)(Units(units.vectors, units.mask)).vector
    assert units.vectors.shape == (3, 1, 32)
    torch.testing.assert_close(today, units.vectors[:, 0])
    torch.testing.assert_close(pooled, today, atol=1e-6, rtol=1e-5)


def test_span_units_are_the_means_of_the_token_states_the_strategy_reads(tiny_backbone):
    s = strategy(unit_tokens=48, pooling="mean", random_blocks=0)
    s.adapt_backbone(tiny_backbone)
    docs = documents([250, 37, 130, 0])
    with torch.no_grad():
        units = s.encode(tiny_backbone, docs)
        states = s.encode_tokens(tiny_backbone, docs)  # B x (T', H)
        document = s.pool(units).vector  # (B, H)
    assert units.mask.sum(1).tolist() == [6, 1, 3, 1]  # ceil(T / 48)
    assert [len(s.unit_spans(len(d))) for d in docs] == [6, 1, 3, 1]
    assert units.sizes[0, :6].tolist() == [48, 48, 48, 48, 48, 10]  # the last span holds what is left
    for b, (doc, state) in enumerate(zip(docs, states)):
        for n, ((start, end),) in enumerate(s.unit_spans(len(doc))):
            if end > start:
                torch.testing.assert_close(units.vectors[b, n], state[start:end].mean(0), atol=1e-6, rtol=1e-5)
        if len(doc):  # mean pooling weighed by span sizes is the mean of every token state read
            torch.testing.assert_close(document[b], state.mean(0), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(document[3], torch.zeros(32))  # an empty document: one zero unit


def test_an_attention_pooler_over_spans_trains_with_the_backbone(tiny_backbone_dir):
    recipe = load_recipe(None, [f"backbone.name={tiny_backbone_dir}", "strategy.name=bigbird",
                                *(f"strategy.{k}={v}" for k, v in {**TINY, "unit_tokens": 32,
                                                                    "pooling": "attention"}.items())])
    torch.manual_seed(0)
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
    output = model(documents([250, 90]))
    output.logits.sum().backward()
    assert output.unit_weights.shape == (2, 8) and output.unit_mask.sum(1).tolist() == [8, 3]
    assert model.strategy.pooler.score.weight.grad.abs().sum() > 0
    assert model.backbone.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.strategy.weights_carry_content()


def test_unit_settings_are_checked_and_old_folders_read_as_one_unit():
    assert unchecked(BigBirdConfig, unit_tokens=-1, pooling="sum").problems("strategy") == [
        "strategy.pooling must be one of mean, max, attention, gated, vote, transformer, got 'sum'",
        "strategy.unit_tokens must be >= 0 (0: one unit per document), got -1",
    ]
    assert BigBirdConfig.ABSENT_MEANS["unit_tokens"] == 0 and BigBirdConfig.ABSENT_MEANS["pooling"] == "mean"
