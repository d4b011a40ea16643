"""The Strategy contract, checked over every registered strategy, and the equivalences between strategies; the
pieces strategies share (the pass builder, the pooling vocabularies, the attention installer); and the registry:
a strategy written in one new file works through the whole model."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import pytest
import torch
from torch import nn
from transformers import BertModel

from helpers import TINY_STRATEGY_SETTINGS, build_model, random_documents, tiny_bert_config
from longbert.config import load_recipe
from longbert.errors import LongbertError
from longbert.modeling.backbone import backbone_token_pooling, resolve_backbone
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.strategies import bigbird, recurrence
from longbert.strategies.attention import base_model
from longbert.strategies.base import (
    ACCELERATOR_PASSES,
    CPU_PASSES,
    REGISTRY,
    EncodesTokens,
    HasCheckpointState,
    HasUnitSpans,
    PassBudget,
    Pooled,
    ReadsWindows,
    SavesLoraModules,
    SpecialTokens,
    Strategy,
    Units,
    WeighsUnits,
    config_fields,
    lora_modules_to_save,
    register,
    unit_spans,
)
from longbert.strategies.configs import (
    STRATEGIES,
    ChunkConfig,
    RecurrenceConfig,
    RmtConfig,
    SlidingConfig,
    TruncateConfig,
)
from longbert.strategies.pooling import (
    SEGMENT_POOLINGS,
    TOKEN_POOLINGS,
    UNIT_POOLINGS,
    AttentionPooler,
    GatedPooler,
    VotePooler,
    build_pooler,
    pool_tokens,
)
from longbert.strategies.registry import build_strategy, get_entry, strategies_with, strategy_names
from longbert.strategies.truncate import keep
from longbert.strategies.windows import (
    ACCELERATOR_WIDTH_MULTIPLE,
    build_pass,
    check_fits,
    encode_windows,
    gather_units,
    new_tokens,
    pass_multiple,
    plan_passes,
    split_windows,
)
from longbert.utils.fields import option

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
    """Under bf16 autocast the backbone's projections compute in bf16 (a hook on every Linear sees bf16 outputs, and
    fp32 ones without autocast), and the logits differ from fp32's by bf16's rounding: more than nothing (autocast ran),
    far less than the logits themselves (the pass is the same)."""
    model = build_model(tiny_backbone_dir, strategy).eval()
    documents = random_documents(LENGTHS)
    seen: list[torch.dtype] = []
    hooks = [m.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
             for m in model.backbone.modules() if isinstance(m, nn.Linear)]
    try:
        with torch.no_grad():
            exact = model(documents).logits.float()  # (B, C)
            plain, seen[:] = set(seen), []
            with torch.autocast("cpu", dtype=torch.bfloat16):
                mixed = model(documents).logits.float()  # (B, C)
    finally:
        for hook in hooks:
            hook.remove()
    assert plain == {torch.float32} and set(seen) == {torch.bfloat16}
    gap = (mixed - exact).abs().max().item()
    assert torch.isfinite(mixed).all() and 0 < gap < 0.05, gap


def test_chunk_equals_truncate_head_when_the_document_fits_one_chunk(tiny_backbone_dir):
    chunk = build_model(tiny_backbone_dir, "chunk", ["strategy.window=60", "strategy.pooling=mean"])
    head = build_model(tiny_backbone_dir, "truncate", ["strategy.mode=head", "strategy.max_tokens=60"])
    documents = random_documents([60, 17, 3])
    with torch.no_grad():
        a = chunk.strategy.pool(chunk.encode(documents)).vector
        b = head.strategy.pool(head.encode(documents)).vector
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "gated", "vote", "transformer"])
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


def test_chunk_is_sliding_with_the_stride_at_the_window_and_keeps_its_own_settings():
    """One module class reads both (they cannot drift apart); chunk keeps its config: no stride to set or save."""
    chunk, sliding = get_entry("chunk"), get_entry("sliding")
    assert chunk.module_cls is sliding.module_cls and chunk.config_cls is not sliding.config_cls
    assert chunk.role == "default" and strategy_names().count("chunk") == 1
    assert [f.name for f in config_fields(ChunkConfig)] == ["window", "pooling", "token_pooling", "unit_weights"]
    assert ChunkConfig(window=37).stride == 37
    with pytest.raises(LongbertError, match=r"^recipe: strategy.window must be >= 1, got 0$"):
        ChunkConfig(window=0)  # checked when built, as a recipe is
    with pytest.raises(LongbertError, match=r"unknown recipe key 'strategy.stride'; valid keys in strategy: name, "
                                            r"window, pooling, token_pooling, unit_weights"):
        load_recipe(None, ["strategy.name=chunk", "strategy.stride=10"])
    strategy = build_strategy(ChunkConfig(window=40), 32, SpecialTokens(101, 102, 0), PassBudget())
    windows, sizes = strategy.windows(torch.arange(90))
    assert [w.tolist() for w in windows] == [list(range(0, 40)), list(range(40, 80)), list(range(80, 90))]
    assert sizes == [40.0, 40.0, 10.0]


@pytest.mark.parametrize("pooling", ["mean", "max", "attention", "gated", "vote", "transformer"])
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
    record = lambda module, args, kwargs: seen.append(kwargs["input_ids"].clone())  # each pass's input ids
    hook = tiny_backbone.register_forward_pre_hook(record, with_kwargs=True)
    with torch.no_grad():
        bounded = encode_windows(tiny_backbone, windows, special,
                                 PassBudget(max_windows=2, max_tokens=10_000, max_padding=0.2))
        hook.remove()
        free = encode_windows(tiny_backbone, windows, special, PassBudget(max_windows=64, max_tokens=10_000))
    assert [p.shape[0] for p in seen] == [2, 2, 1]
    assert [p.shape[1] for p in seen] == [42, 14, 5], "each pass is padded to its own longest window"
    assert all((p[:, 0] == tokenizer.cls_token_id).all() for p in seen)
    assert sum((p == tokenizer.sep_token_id).sum().item() for p in seen) == len(windows)
    torch.testing.assert_close(bounded, free, atol=1e-5, rtol=1e-4)
    seen.clear()
    hook = tiny_backbone.register_forward_pre_hook(record, with_kwargs=True)
    with torch.no_grad():
        encode_windows(tiny_backbone, windows, special, PassBudget(max_windows=64, max_tokens=84))
    hook.remove()
    assert all(p.numel() <= 84 for p in seen)


def test_a_window_larger_than_the_backbones_positions_is_a_clear_error(tiny_backbone_dir):
    with pytest.raises(LongbertError, match=r"strategy.window must leave room.*at most 126\), got 510"):
        build_model(tiny_backbone_dir, "chunk", ["strategy.window=510"])


def test_a_short_window_gets_its_own_pass_rather_than_much_padding():
    lengths = [512, 512, 100, 500, 90]
    assert plan_passes(lengths, PassBudget(max_padding=0.2)) == [[0, 1, 3], [2, 4]]
    assert plan_passes(lengths, PassBudget(max_padding=1.0)) == [[0, 1, 3, 2, 4]]
    assert plan_passes(lengths, PassBudget(max_windows=2, max_padding=1.0)) == [[0, 1], [3, 2], [4]]


def test_a_limit_left_open_follows_the_device_and_a_limit_set_holds_everywhere():
    as_tuple = lambda b: (b.max_windows, b.max_tokens, b.max_padding)
    assert as_tuple(PassBudget().on("cpu")) == as_tuple(PassBudget().on(None)) == CPU_PASSES
    assert as_tuple(PassBudget().on(torch.device("cuda", 0))) == ACCELERATOR_PASSES
    assert ACCELERATOR_PASSES[2] > CPU_PASSES[2] and ACCELERATOR_PASSES[1] > CPU_PASSES[1]
    set_here = PassBudget(max_windows=3, max_padding=0.5)
    assert as_tuple(set_here.on("cuda")) == (3, ACCELERATOR_PASSES[1], 0.5)
    assert as_tuple(set_here.on("cuda").on("cpu")) == (3, ACCELERATOR_PASSES[1], 0.5), "resolved once, kept"


def test_on_an_accelerator_a_pass_is_as_wide_as_a_multiple_of_64_where_the_positions_allow(tiny_backbone):
    windows = random_documents([100, 7], seed=1)  # 102 tokens with [CLS]/[SEP]: 128 fits the 128 positions
    assert pass_multiple(tiny_backbone, windows, 1, torch.device("cpu")) == 1
    assert pass_multiple(tiny_backbone, windows, 1, torch.device("cuda")) == ACCELERATOR_WIDTH_MULTIPLE == 64
    assert pass_multiple(tiny_backbone, windows, 16, torch.device("cuda")) == 64
    assert pass_multiple(tiny_backbone, windows, 48, torch.device("cuda")) == 48, "192 would pass the positions"


@pytest.mark.gpu
def test_on_a_gpu_the_passes_are_rounded_and_read_what_the_cpu_reads(tiny_backbone, tokenizer):
    special = SpecialTokens.from_tokenizer(tokenizer)
    windows = random_documents([40, 3, 90, 12, 7], seed=5)
    with torch.no_grad():
        on_cpu = encode_windows(tiny_backbone, windows, special, PassBudget())
        gpu = tiny_backbone.to("cuda")
        widths = []
        hook = gpu.register_forward_pre_hook(lambda m, a, k: widths.append(k["input_ids"].shape[1]), with_kwargs=True)
        on_gpu = encode_windows(gpu, windows, special, PassBudget())
        hook.remove()
    assert widths and all(w % 64 == 0 for w in widths)
    assert len(widths) < len(windows), "the accelerator's budget packs several windows a pass"
    torch.testing.assert_close(on_gpu.cpu(), on_cpu, atol=1e-4, rtol=1e-3)


# -- the optional hooks: each a Protocol, each strategy says which it has ---------------------------------------

HOOKS = (HasUnitSpans, ReadsWindows, WeighsUnits, HasCheckpointState, EncodesTokens, SavesLoraModules)
DECLARED_HOOKS = {
    "truncate": {HasUnitSpans, ReadsWindows},
    "chunk": {HasUnitSpans, ReadsWindows, WeighsUnits},
    "sliding": {HasUnitSpans, ReadsWindows, WeighsUnits},
    "bigbird": {HasUnitSpans, HasCheckpointState, EncodesTokens, SavesLoraModules, WeighsUnits},
    "recurrence": {HasUnitSpans, EncodesTokens, WeighsUnits},
    "rmt": {HasUnitSpans, WeighsUnits},
}


def protocol_methods(protocol: type) -> list[str]:
    return [name for name, member in vars(protocol).items() if inspect.isfunction(member) and not name.startswith("_")]


@pytest.mark.parametrize("name", ALL)
def test_each_strategy_has_exactly_the_hooks_it_declares_with_the_protocols_signatures(name):
    """A runtime-checkable Protocol checks names only: the parameters are compared here, so that a hook spelled
    with other arguments fails rather than being called wrongly."""
    assert name in DECLARED_HOOKS, "declare the new strategy's hooks in DECLARED_HOOKS"
    entry = get_entry(name)
    strategy = build_strategy(entry.config_cls(), 32, SpecialTokens(101, 102, 0), PassBudget())
    assert isinstance(strategy, Strategy)
    assert {hook for hook in HOOKS if isinstance(strategy, hook)} == DECLARED_HOOKS[name]
    for protocol in (Strategy, *DECLARED_HOOKS[name]):
        for method in protocol_methods(protocol):
            expected = list(inspect.signature(getattr(protocol, method)).parameters)
            assert list(inspect.signature(getattr(strategy, method).__func__).parameters) == expected, (name, method)
    assert strategies_with(ReadsWindows) == sorted(n for n, hooks in DECLARED_HOOKS.items() if ReadsWindows in hooks)


def test_hooks_a_model_reaches_through_the_protocols(tiny_backbone_dir):
    """What the helpers in base.py give for strategies with and without a hook."""
    assert lora_modules_to_save(build_model(tiny_backbone_dir, "bigbird").strategy) == ("position_embeddings",)
    assert lora_modules_to_save(build_model(tiny_backbone_dir, "chunk").strategy) == ()
    assert unit_spans(nn.Identity(), 10) is None
    pooled = {p: build_model(tiny_backbone_dir, "chunk", [f"strategy.pooling={p}"]).strategy
              for p in ("mean", "max", "attention")}
    assert {p: s.weights_carry_content() for p, s in pooled.items()} == {"mean": False, "max": True, "attention": True}


# -- shared pieces: the pass builder, the pooling vocabularies ---------------------------------------------------


def test_build_pass_lays_out_cls_piece_sep_then_padding():
    special = SpecialTokens(cls_id=101, sep_id=102, pad_id=7)
    pieces = [torch.tensor([5, 6, 8]), torch.tensor([], dtype=torch.long), torch.arange(1000, 1010)]
    for multiple, width in ((1, 12), (8, 16), (12, 12), (5, 15)):
        input_ids, attention_mask = build_pass(pieces, special, "cpu", multiple)  # (W, L), (W, L)
        rows = [[101, *p.tolist(), 102] for p in pieces]
        assert input_ids.tolist() == [row + [7] * (width - len(row)) for row in rows], multiple
        assert attention_mask.tolist() == [[1] * len(row) + [0] * (width - len(row)) for row in rows], multiple
        assert input_ids.dtype == attention_mask.dtype == torch.long


def test_each_strategy_accepts_its_own_pooling_vocabulary():
    assert set(UNIT_POOLINGS) < set(SEGMENT_POOLINGS) and "last" in SEGMENT_POOLINGS
    for config in (ChunkConfig, SlidingConfig):
        with pytest.raises(LongbertError) as refused:
            config(pooling="last")
        assert str(refused.value) == f"recipe: strategy.pooling must be one of {', '.join(UNIT_POOLINGS)}, got 'last'"
    for config in (RecurrenceConfig, RmtConfig):
        assert all(config(pooling=p).problems("strategy") == [] for p in SEGMENT_POOLINGS)
    assert all(ChunkConfig(token_pooling=p).problems("strategy") == [] for p in TOKEN_POOLINGS)
    units = gather_units(torch.arange(12.0).view(3, 4), [2, 1])  # (B, N, H) = (2, 2, 4)
    for kind in SEGMENT_POOLINGS:
        assert build_pooler(kind, 4)(units).vector.shape == (2, 4), kind
    torch.testing.assert_close(build_pooler("last", 4)(units).vector, torch.tensor([[4.0, 5, 6, 7], [8, 9, 10, 11]]))
    with pytest.raises(ValueError, match="unknown pooler 'sum'"):
        build_pooler("sum", 4)


# -- shared pieces: the attention installer (bigbird and recurrence) ---------------------------------------------


def attention_users():
    return {
        # A narrow window on every document: block-sparse, unlike the plain backbone.
        "bigbird": (bigbird.BigBirdConfig(max_tokens=256, block_size=16, window_blocks=1, global_blocks=1,
                                          random_blocks=0, full_attention_up_to=0, token_pooling="mean"),
                    bigbird.ATTENTION_NAME),
        # The distance bias off: at its starting value (-3) memory barely moves a tiny random model.
        "recurrence": (recurrence.RecurrenceConfig(segment=20, memory=22, token_pooling="mean", distance_bias=False),
                       recurrence.ATTENTION_NAME),
    }


def tiny_encoder(lora: bool = False, model_class=None, **settings) -> nn.Module:
    """A tiny random BertModel (seeded: two calls give the same weights), optionally wrapped by peft LoRA (its B
    matrices start at zero, so the wrapped model computes what the plain one does)."""
    torch.manual_seed(0)
    model = (model_class or BertModel)(tiny_bert_config(**settings), add_pooling_layer=False).eval()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=2, target_modules=["query", "value"])).eval()
    return model


def install(name: str, backbone: nn.Module) -> nn.Module:
    config, _ = attention_users()[name]
    strategy = build_strategy(config, 32, SpecialTokens(cls_id=101, sep_id=102, pad_id=0), PassBudget())
    strategy.adapt_backbone(backbone)
    return strategy


@pytest.mark.parametrize("name", ["bigbird", "recurrence"])
def test_bigbird_and_recurrence_install_their_attention_on_plain_and_lora_backbones(name):
    attention_name = attention_users()[name][1]
    documents = random_documents([60, 13])
    vectors = {}
    for lora in (False, True):
        backbone = tiny_encoder(lora)
        strategy = install(name, backbone)
        install(name, backbone)  # installing twice changes nothing
        assert base_model(backbone).config._attn_implementation == attention_name
        assert (backbone is not base_model(backbone)) == lora
        with torch.no_grad():
            vectors[lora] = strategy.encode(backbone, documents).vectors  # (B, N, H)
            # Called without the strategy's keyword argument, the backbone reads plainly (the shared fallback):
            # the strategy's own reading of the long document differs, so its attention is the one in use.
            second = documents[0][20:40] if name == "recurrence" else documents[0]
            ids = torch.cat([torch.tensor([101]), second, torch.tensor([102])])[None]  # (1, L)
            plain = backbone(input_ids=ids).last_hidden_state[0].mean(0)  # (H,)
        read = vectors[lora][0, 1] if name == "recurrence" else vectors[lora][0, 0]
        assert not torch.allclose(read, plain, atol=1e-3), "the strategy's attention runs, also under LoRA"
    torch.testing.assert_close(vectors[True], vectors[False], atol=1e-5, rtol=1e-5)


class NoAttentionBackendBert(BertModel):
    """A BERT whose attention, as far as transformers knows, does not go through the AttentionInterface."""

    _supports_attention_backend = False


class StubbornBert(BertModel):
    """A BERT that ignores requests to change its attention implementation."""

    def set_attn_implementation(self, attn_implementation, **kwargs):
        pass


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
@pytest.mark.parametrize("name", ["bigbird", "recurrence"])
def test_backbones_that_cannot_take_the_attention_are_refused_clearly(name, lora):
    decoder = tiny_encoder(lora, is_decoder=True)
    with pytest.raises(LongbertError, match=rf"^strategy {name} needs an encoder backbone; this BertModel is "
                                            "configured as a decoder$"):
        install(name, decoder)
    refused = base_model(decoder)
    assert refused.config._attn_implementation == "sdpa", "a refused backbone keeps its attention"
    assert refused.embeddings.position_embeddings.num_embeddings == 128, "and its positions"
    legacy = tiny_encoder(lora, NoAttentionBackendBert)
    with pytest.raises(LongbertError, match=rf"^strategy {name} needs a backbone whose attention goes through "
                                            "transformers' AttentionInterface; NoAttentionBackendBert does not$"):
        install(name, legacy)
    with pytest.raises(LongbertError, match=rf"^strategy {name} could not switch the attention of StubbornBert"):
        install(name, tiny_encoder(lora, StubbornBert))


# -- the registry: a strategy is one new file ------------------------------------------------------------------


@dataclass
class MiddleConfig:
    name: str = "middle"
    window: int = option(20, "content tokens kept from the middle of the document")

    def problems(self, path: str) -> list[str]:
        return [] if self.window >= 1 else [f"{path}.window must be >= 1, got {self.window}"]


def middle(length: int, window: int) -> tuple[int, int]:
    """The token range of the middle `window` tokens of a document of `length` tokens."""
    start = max(0, (length - window) // 2)
    return start, min(length, start + window)


class MiddleStrategy(nn.Module):
    """One window from the middle of each document: written against the contract and the shared helpers only."""

    def __init__(self, config: MiddleConfig, hidden_size: int, special: SpecialTokens, budget: PassBudget):
        super().__init__()
        self.config, self.special, self.budget = config, special, budget

    def adapt_backbone(self, backbone: nn.Module) -> None:
        check_fits(backbone, self.config.window, "strategy.window")

    def encode(self, backbone: nn.Module, documents: list[torch.Tensor]):
        windows = [ids[slice(*middle(ids.shape[0], self.config.window))] for ids in documents]
        return gather_units(encode_windows(backbone, windows, self.special, self.budget), [1] * len(documents))

    def unit_spans(self, length: int) -> list[list[tuple[int, int]]]:
        return [[middle(length, self.config.window)]]

    def pool(self, units) -> Pooled:
        return Pooled(units.vectors[:, 0], units.mask.to(units.vectors.dtype))  # (B, H)


def test_a_strategy_registered_from_one_new_file_works_through_the_whole_model(tiny_backbone_dir, tmp_path):
    assert "middle" not in REGISTRY
    register("middle", MiddleConfig, "one window from the middle of each document (a test strategy)")(MiddleStrategy)
    try:
        assert "middle" in strategy_names()
        model = build_model(tiny_backbone_dir, "middle", ["strategy.window=20"])
        documents = random_documents([100, 7, 45])
        with torch.no_grad():
            logits = model(documents).logits
            units = model.encode(documents)
        assert logits.shape == (3, 2) and units.vectors.shape == (3, 1, 32)
        assert unit_spans(model.strategy, 100) == [[(40, 60)]]
        assert unit_spans(model.strategy, 7) == [[(0, 7)]]
        # Equivalence: the middle window is truncate's head of the middle slice.
        head = build_model(tiny_backbone_dir, "truncate", ["strategy.mode=head", "strategy.max_tokens=20"])
        slices = [d[slice(*middle(d.shape[0], 20))] for d in documents]
        with torch.no_grad():
            torch.testing.assert_close(units.vectors, head.encode(slices).vectors)
        model.save_pretrained(tmp_path / "middle")
        with torch.no_grad():
            loaded = LongDocumentClassifier.from_pretrained(tmp_path / "middle")(documents).logits
        torch.testing.assert_close(loaded, logits)
        with pytest.raises(LongbertError, match="strategy.window must be >= 1, got 0"):
            build_model(tiny_backbone_dir, "middle", ["strategy.window=0"])
    finally:
        REGISTRY.pop("middle", None)
        STRATEGIES.pop("middle", None)
    assert "middle" not in strategy_names()


# -- Unit weights: a window counts for the tokens it adds -------------------------------------------------------


def test_windows_count_the_tokens_they_add_to_those_before_them():
    ids = torch.arange(766)
    assert new_tokens(split_windows(ids, 510, 255), 255) == [510, 255, 1]  # the third window adds one token
    assert new_tokens(split_windows(ids, 510, 510), 510) == [510, 256]  # chunks: every token is new
    assert new_tokens(split_windows(torch.arange(37), 40, 20), 20) == [37]
    for length in (1, 39, 41, 260):
        for window, stride in ((40, 40), (40, 20), (40, 7)):
            assert sum(new_tokens(split_windows(torch.arange(length), window, stride), stride)) == length


@pytest.mark.parametrize("name", ["chunk", "sliding"])
def test_mean_pooling_weighs_windows_by_their_new_tokens(name, tiny_backbone_dir):
    """new_tokens (the default) is the mean of the window vectors weighted by the tokens each adds; equal is the
    plain mean. A 1-token tail therefore barely moves the document vector."""
    mean = ["strategy.pooling=mean", "strategy.token_pooling=cls"]
    weighted = build_model(tiny_backbone_dir, name, mean)
    equal = build_model(tiny_backbone_dir, name, [*mean, "strategy.unit_weights=equal"])
    document = random_documents([81])  # window 40: chunk 40+40+1; sliding (stride 20) 40+20+20+1
    units = weighted.encode(document)
    expected_sizes = {"chunk": [40, 40, 1], "sliding": [40, 20, 20, 1]}[name]
    assert units.sizes[0].tolist() == expected_sizes
    pooled = weighted.strategy.pool(units)
    sizes = torch.tensor(expected_sizes, dtype=torch.float32)
    assert torch.allclose(pooled.weights[0], sizes / sizes.sum())
    assert torch.allclose(pooled.vector[0], (units.vectors[0] * (sizes / sizes.sum())[:, None]).sum(0), atol=1e-6)
    plain = equal.strategy.pool(equal.encode(document))
    assert equal.encode(document).sizes is None
    assert torch.allclose(plain.weights[0], torch.full((len(expected_sizes),), 1 / len(expected_sizes)))
    assert not torch.allclose(plain.vector, pooled.vector)


# -- token_pooling: auto follows the backbone's own pooling config ----------------------------------------------


def _with_pooling_config(folder, tmp_path, mode):
    import json
    import shutil

    target = tmp_path / f"st-{mode}"
    shutil.copytree(folder, target)
    (target / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (target / "1_Pooling").mkdir()
    (target / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 32, "pooling_mode_cls_token": mode == "cls",
         "pooling_mode_mean_tokens": mode == "mean"}))
    return str(target)


def test_auto_token_pooling_follows_the_backbones_pooling_config_and_is_saved(tiny_backbone_dir, tmp_path):
    plain = build_model(tiny_backbone_dir, "chunk")  # a folder without sentence-transformers modules: cls
    assert plain.settings.strategy.token_pooling == "cls"
    assert "no sentence-transformers pooling config" in plain.notes[0]
    folders = {mode: _with_pooling_config(tiny_backbone_dir, tmp_path, mode) for mode in ("mean", "cls")}
    for mode in ("mean", "cls"):
        model = build_model(folders[mode], "sliding")
        assert model.settings.strategy.token_pooling == mode, mode
        does = "mean-pools its token states" if mode == "mean" else "takes the [CLS] state"
        assert model.notes == [f"strategy.token_pooling: auto -> {mode} (the backbone's sentence-transformers "
                               f"pooling config {does})"]
    model.save_pretrained(tmp_path / "saved")
    assert LongDocumentClassifier.from_pretrained(tmp_path / "saved").settings.strategy.token_pooling == "cls"
    explicit = build_model(folders["mean"], "chunk", ["strategy.token_pooling=cls"])
    assert explicit.settings.strategy.token_pooling == "cls" and explicit.notes == []  # an explicit choice stands


def test_minilm_says_it_mean_pools():
    class Loaded:  # what backbone_token_pooling reads: where the model came from
        config = type("Config", (), {"name_or_path": resolve_backbone("minilm")})()

    assert backbone_token_pooling(Loaded())[0] == "mean"


def test_an_unresolved_auto_is_refused_where_tokens_are_pooled():
    with pytest.raises(ValueError, match="token pooling must be one of"):
        pool_tokens(torch.zeros(1, 3, 4), torch.ones(1, 3), "auto")


def test_a_pooled_vector_owns_its_memory_and_keeps_no_pass_alive():
    hidden = torch.randn(1, 512, 32)  # (W, L, H): one segment's states
    for how in ("cls", "mean"):
        vector = pool_tokens(hidden, torch.ones(1, 512), how)  # (1, H)
        assert vector.untyped_storage().nbytes() == vector.numel() * vector.element_size(), how


def test_the_gated_pooler_counts_every_open_unit_equally_where_attention_settles_on_one():
    """Gates equal (at the start): the plain mean. Gates open on two units and shut on the rest: the mean of those
    two, however unequal their scores, where attention's softmax over the same scores gives the higher one nearly
    all the weight. A missing unit never counts."""
    torch.manual_seed(0)
    vectors = torch.randn(1, 4, 8)
    mask = torch.tensor([[True, True, True, False]])
    gated = GatedPooler(8)
    with torch.no_grad():
        gated.score.weight.zero_()
        torch.testing.assert_close(gated(Units(vectors, mask)).vector, vectors[0, :3].mean(0, keepdim=True))
        # scores: units 0 and 1 high (72 and 76), unit 2 low (-76); the same scorer in both poolers
        attention = AttentionPooler(8)
        for pooler in (gated, attention):
            pooler.project.weight.copy_(torch.eye(8))
            pooler.project.bias.zero_()
            pooler.score.weight.zero_()
        units = torch.zeros(1, 4, 8)
        units[0, :, 0] = torch.tensor([0.9, 0.99, -0.99, 0.0])  # tanh keeps the order; scores are 100 times it
        for pooler in (gated, attention):
            pooler.score.weight[0, 0] = 100.0
        g, a = gated(Units(units, mask)), attention(Units(units, mask))
    assert abs(g.weights[0, 0] - g.weights[0, 1]) < 0.01 and g.weights[0, 2] < 1e-4 and g.weights[0, 3] == 0
    assert a.weights[0, 1] > 0.95  # the softmax: one unit takes it all


def test_the_vote_pooler_counts_units_where_attention_adds_up_their_strength():
    """One emphatic unit against two mild ones of the other sign, weighed equally: attention's mean (and so the
    linear head after it) follows the emphatic one; the vote pooler's bounded votes follow the two. At the start
    (identity projection) a unit's vote is tanh of its vector, and a missing unit never counts."""
    vote, attention = VotePooler(4), AttentionPooler(4)
    units = torch.zeros(1, 4, 4)
    units[0, :3, 0] = torch.tensor([50.0, -2.0, -2.0])
    units[0, 3, 0] = 1000.0  # unit 3 is padding
    mask = torch.tensor([[True, True, True, False]])
    with torch.no_grad():
        for pooler in (vote.attention, attention):
            pooler.score.weight.zero_()  # equal weights on the three units that exist
        v, a = vote(Units(units, mask)), attention(Units(units, mask))
        torch.testing.assert_close(v.weights, a.weights)
        torch.testing.assert_close(v.weights[0], torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]))
        assert a.vector[0, 0] > 0 > v.vector[0, 0]  # (50 - 4) / 3 against (tanh 50 - 2 tanh 2) / 3
        torch.testing.assert_close(v.vector, (torch.tanh(units[:, :3]) / 3).sum(1))
        assert v.vector.abs().max() < 1
        one = Units(units[:, :1] / 100, mask[:, :1])  # one small unit: its vote is about the vector itself
        torch.testing.assert_close(vote(one).vector, torch.tanh(units[:, 0] / 100))
