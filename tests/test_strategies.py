"""The Strategy contract, checked over every registered strategy, and the equivalences between strategies."""

from __future__ import annotations

import pytest
import torch

from helpers import TINY_STRATEGY_SETTINGS, build_model, random_documents
from longbert.strategies.base import PassBudget, SpecialTokens, strategy_names
from longbert.strategies.windows import encode_windows, split_windows

ALL = strategy_names()
LENGTHS = [5, 37, 260, 90]  # shorter than a window, about one window, many windows


def test_every_registered_strategy_has_tiny_settings():
    assert set(ALL) <= set(TINY_STRATEGY_SETTINGS), "add the new strategy to tests/helpers.py"


@pytest.mark.parametrize("strategy", ALL)
def test_output_shape_and_units(strategy, tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, strategy, labels=("a", "b", "c"))
    documents = random_documents(LENGTHS)
    units = model.encode(documents)
    assert units.vectors.shape[0] == len(LENGTHS) and units.vectors.shape[2] == 32
    assert units.mask.shape == units.vectors.shape[:2]
    assert units.mask.any(1).all(), "every document has at least one unit"
    out = model(documents)
    assert out.logits.shape == (len(LENGTHS), 3)
    assert torch.isfinite(out.logits).all()


@pytest.mark.parametrize("strategy", ALL)
def test_gradients_reach_the_backbone(strategy, tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, strategy).train()
    logits = model(random_documents(LENGTHS)).logits
    model.loss(logits, torch.tensor([0, 1, 0, 1])).backward()
    layers = [p for n, p in model.backbone.named_parameters() if "encoder.layer.0." in n and p.requires_grad]
    assert layers and all(p.grad is not None and p.grad.abs().sum() > 0 for p in layers)
    assert model.head.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("strategy", ALL)
def test_padding_and_batch_composition_do_not_change_a_document(strategy, tiny_backbone_dir):
    """A short document alone, next to a long one (more windows, more padding), and in another order."""
    model = build_model(tiny_backbone_dir, strategy)
    short, long, medium = random_documents([12, 300, 70], seed=1)
    with torch.no_grad():
        alone = model([short]).logits[0]
        mixed = model([long, short, medium]).logits
        reordered = model([medium, short]).logits[1]
        long_alone = model([long]).logits[0]
    torch.testing.assert_close(mixed[1], alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(reordered, alone, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[0], long_alone, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("strategy", ALL)
def test_bf16_autocast_forward(strategy, tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, strategy)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(random_documents(LENGTHS)).logits
    assert torch.isfinite(logits.float()).all()


def test_chunk_equals_truncate_head_when_the_document_fits_one_chunk(tiny_backbone_dir):
    chunk = build_model(tiny_backbone_dir, "chunk", ["strategy.window=60"])
    head = build_model(tiny_backbone_dir, "truncate", ["strategy.mode=head", "strategy.max_tokens=60"])
    documents = random_documents([60, 17, 3])
    with torch.no_grad():
        a = chunk.strategy.pool(chunk.encode(documents)).vector
        b = head.strategy.pool(head.encode(documents)).vector
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "transformer"])
def test_sliding_with_stride_equal_to_window_equals_chunk(pooling, tiny_backbone_dir):
    chunk = build_model(tiny_backbone_dir, "chunk", ["strategy.window=40", f"strategy.pooling={pooling}"], seed=3)
    sliding = build_model(tiny_backbone_dir, "sliding", ["strategy.window=40", "strategy.stride=40",
                                                         f"strategy.pooling={pooling}"], seed=3)
    documents = random_documents([250, 41, 40, 7], seed=2)
    with torch.no_grad():
        a, b = chunk.encode(documents), sliding.encode(documents)
        torch.testing.assert_close(a.vectors, b.vectors)
        assert torch.equal(a.mask, b.mask)
        torch.testing.assert_close(chunk(documents).logits, sliding(documents).logits)


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "transformer"])
def test_every_pooler_ignores_missing_units(pooling, tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk", ["strategy.window=40", f"strategy.pooling={pooling}"])
    short, long = random_documents([30, 330], seed=4)
    with torch.no_grad():
        torch.testing.assert_close(model([short, long]).logits[0], model([short]).logits[0], atol=1e-5, rtol=1e-4)


def test_sliding_overlaps_and_covers_the_document():
    ids = torch.arange(100)
    windows = split_windows(ids, window=40, stride=25)
    assert [w[0].item() for w in windows] == [0, 25, 50, 75]
    assert windows[-1][-1].item() == 99 and all(len(w) <= 40 for w in windows)
    assert set(torch.cat(windows).tolist()) == set(range(100))
    assert [len(w) for w in split_windows(ids, 50, 50)] == [50, 50]
    assert [len(w) for w in split_windows(torch.arange(0), 50, 50)] == [0]


def test_truncate_modes_keep_the_right_tokens(tiny_backbone_dir):
    from longbert.strategies.truncate import TruncateConfig, keep

    ids = torch.arange(1000)
    assert keep(ids, TruncateConfig(mode="head", max_tokens=10)).tolist() == list(range(10))
    assert keep(ids, TruncateConfig(mode="tail", max_tokens=10)).tolist() == list(range(990, 1000))
    both = keep(ids, TruncateConfig(mode="head_tail", max_tokens=510, head_tokens=128)).tolist()
    assert both == list(range(128)) + list(range(1000 - 382, 1000))
    assert keep(torch.arange(20), TruncateConfig(mode="head_tail", max_tokens=510)).tolist() == list(range(20))


def test_passes_are_bounded_dynamically_padded_and_use_the_tokenizers_special_ids(tiny_backbone, tokenizer):
    special = SpecialTokens.from_tokenizer(tokenizer)
    windows = random_documents([40, 3, 40, 12, 7], seed=5)
    seen = []
    hook = tiny_backbone.register_forward_pre_hook(lambda m, a, k: seen.append(k["input_ids"].clone()), with_kwargs=True)
    with torch.no_grad():
        bounded = encode_windows(tiny_backbone, windows, special, PassBudget(max_windows=2, max_tokens=10_000))
        hook.remove()
        free = encode_windows(tiny_backbone, windows, special, PassBudget(max_windows=64, max_tokens=10_000))
    assert [p.shape[0] for p in seen] == [2, 2, 1]
    assert [p.shape[1] for p in seen] == [42, 14, 5], "each pass is padded to its own longest window"
    assert all((p[:, 0] == tokenizer.cls_token_id).all() for p in seen)
    assert sum((p == tokenizer.sep_token_id).sum().item() for p in seen) == len(windows)
    torch.testing.assert_close(bounded, free, atol=1e-5, rtol=1e-4)
    seen.clear()
    hook = tiny_backbone.register_forward_pre_hook(lambda m, a, k: seen.append(k["input_ids"].clone()), with_kwargs=True)
    with torch.no_grad():
        encode_windows(tiny_backbone, windows, special, PassBudget(max_windows=64, max_tokens=84))
    hook.remove()
    assert all(p.numel() <= 84 for p in seen)


def test_a_window_larger_than_the_backbones_positions_is_a_clear_error(tiny_backbone_dir):
    from longbert.errors import LongbertError

    with pytest.raises(LongbertError, match=r"strategy.window must leave room.*at most 126\), got 510"):
        build_model(tiny_backbone_dir, "chunk", ["strategy.window=510"])


def test_a_short_window_gets_its_own_pass_rather_than_much_padding():
    from longbert.strategies.windows import plan_passes

    lengths = [512, 512, 100, 500, 90]
    assert plan_passes(lengths, PassBudget(max_padding=0.2)) == [[0, 1, 3], [2, 4]]
    assert plan_passes(lengths, PassBudget(max_padding=1.0)) == [[0, 1, 3, 2, 4]]
    assert plan_passes(lengths, PassBudget(max_windows=2, max_padding=1.0)) == [[0, 1], [3, 2], [4]]
