"""`recurrence` (Transformer-XL memory of keys/values) and `rmt` (memory tokens) on a tiny random BERT: memory 0 is
plain segments, the memory carries earlier segments forward exactly as documented (positions included),
gradients stop or flow as configured, batches and padding change nothing, inference keeps no per-segment
activations, and LoRA, save/load and bf16 work."""

from __future__ import annotations

import weakref

import pytest
import torch

from helpers import unchecked
from longbert.config import load_recipe
from longbert.errors import LongbertError
from longbert.strategies.base import PassBudget, SpecialTokens
from longbert.strategies.configs import RecurrenceConfig, RmtConfig
from longbert.strategies.recurrence import ATTENTION_NAME
from longbert.strategies.registry import build_strategy

SPECIAL = SpecialTokens(cls_id=101, sep_id=102, pad_id=0)
SEGMENT = 12


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Many tiny sequential passes: a second thread only adds synchronisation (badly so on a shared CPU)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(backbone, config, budget: PassBudget | None = None):
    strategy = build_strategy(config, backbone.config.hidden_size, SPECIAL, budget or PassBudget())
    strategy.adapt_backbone(backbone)
    return strategy


def documents(*lengths: int, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(1000, 20000, (n,), generator=generator) for n in lengths]


def wrapped(piece: torch.Tensor) -> list[int]:
    return [SPECIAL.cls_id, *piece.tolist(), SPECIAL.sep_id]


def randomize_memory_bias(strategy, seed: int = 1, same_for_every_layer: bool = False) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        table = torch.randn(strategy.memory_bias.shape, generator=generator)  # (layers, A, S)
        if same_for_every_layer:
            table[:] = table[0]
        strategy.memory_bias.copy_(table)


def recurrence(**kw) -> RecurrenceConfig:
    # The age bias on and the distance bias off unless a test says otherwise: most tests check the age bias's
    # documented reading; the distance bias has its own reference test.
    return RecurrenceConfig(**{"segment": SEGMENT, "memory": SEGMENT + 2, "token_pooling": "cls", "memory_bias": True,
                               "distance_bias": False, **kw})


def rmt(**kw) -> RmtConfig:
    return RmtConfig(**{"segment": SEGMENT, "memory_tokens": 3, "token_pooling": "cls", **kw})


# -- memory 0 is plain segments --------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [recurrence(memory=0), rmt(memory_tokens=0)], ids=["recurrence", "rmt"])
def test_without_memory_every_segment_is_read_by_the_plain_backbone(tiny_backbone, config):
    docs = documents(40, 5, 0, 25)  # 4, 1 (shorter than a segment), 1 (empty), 3 segments
    strategy = make(tiny_backbone, config)
    with torch.no_grad():
        units = strategy.encode(tiny_backbone, docs)
        assert units.mask.sum(1).tolist() == [4, 1, 1, 3]
        for b, doc in enumerate(docs):
            for n, start in enumerate(range(0, max(len(doc), 1), SEGMENT)):
                ids = torch.tensor([wrapped(doc[start : start + SEGMENT])])
                expected = tiny_backbone(input_ids=ids).last_hidden_state[0, 0]
                torch.testing.assert_close(units.vectors[b, n], expected, atol=1e-5, rtol=1e-5)


def test_recurrence_attention_without_a_memory_is_plain_attention(tiny_backbone):
    ids = torch.tensor([wrapped(documents(20)[0]), wrapped(documents(20)[0][:9]) + [0] * 11])
    attention_mask = (ids != 0).long()
    with torch.no_grad():
        before = tiny_backbone(input_ids=ids, attention_mask=attention_mask).last_hidden_state
        strategy = make(tiny_backbone, recurrence())
        make(tiny_backbone, recurrence())  # adapting twice changes nothing
        assert tiny_backbone.config._attn_implementation == ATTENTION_NAME
        assert strategy.memory_bias.shape == (2, 4, 1)
        after = tiny_backbone(input_ids=ids, attention_mask=attention_mask).last_hidden_state
    torch.testing.assert_close(after[attention_mask.bool()], before[attention_mask.bool()], atol=1e-5, rtol=1e-5)


# -- the memory carries earlier segments forward ---------------------------------------------------------------


def segment_vectors(backbone, strategy, doc):
    with torch.no_grad():
        return strategy.encode(backbone, [doc]).vectors[0]  # (N, H)


@pytest.mark.parametrize("memory", [0, SEGMENT + 2])
def test_recurrence_an_early_segment_reaches_later_ones_only_through_memory(tiny_backbone, memory):
    doc = documents(4 * SEGMENT)[0]
    changed = doc.clone()
    changed[:SEGMENT] = documents(SEGMENT, seed=5)[0]  # a different first segment
    strategy = make(tiny_backbone, recurrence(memory=memory))
    randomize_memory_bias(strategy) if memory else None
    a, b = segment_vectors(tiny_backbone, strategy, doc), segment_vectors(tiny_backbone, strategy, changed)
    moved = [bool((a[n] != b[n]).any()) for n in range(4)]  # exact: an unreached segment computes the same bits
    if memory == 0:
        assert moved == [True, False, False, False]
    else:
        # A memory of one segment reaches one segment further per layer: 2 layers see 2 segments back, not 3.
        assert moved == [True, True, True, False]


def test_rmt_an_early_segment_reaches_every_later_one(tiny_backbone):
    doc = documents(4 * SEGMENT)[0]
    changed = doc.clone()
    changed[:SEGMENT] = documents(SEGMENT, seed=5)[0]
    for config, expected in ((rmt(), [True] * 4), (rmt(memory_tokens=0), [True, False, False, False])):
        torch.manual_seed(0)
        strategy = make(tiny_backbone, config)
        a, b = segment_vectors(tiny_backbone, strategy, doc), segment_vectors(tiny_backbone, strategy, changed)
        assert [bool((a[n] != b[n]).any()) for n in range(4)] == expected


def masked_reference(backbone, doc, memory: int, memory_segments: int, table: torch.Tensor | None,
                     distance_table: torch.Tensor | None = None):
    """The documented recurrence, written as one plain-backbone pass over all segments side by side: each
    segment has positions 0..L-1; its queries read its own tokens and the latest `memory` tokens of the
    `memory_segments` segments before it, with the bias table[:, age - 1] on those and, with a distance table,
    distance_table[:, bucket(query index - key index)] counted over the concatenated passes ([CLS]/[SEP] included);
    [CLS] vectors per segment."""
    from longbert.strategies.recurrence import distance_bucket

    pieces = [wrapped(doc[s : s + SEGMENT]) for s in range(0, len(doc), SEGMENT)]
    segment_of = torch.tensor([n for n, p in enumerate(pieces) for _ in p])  # (T,)
    positions = torch.cat([torch.arange(len(p)) for p in pieces])
    ids = torch.tensor([t for p in pieces for t in p])
    total, heads = len(ids), backbone.config.num_attention_heads
    scores = torch.full((heads, total, total), float("-inf"))
    for n in range(len(pieces)):
        queries = segment_of == n
        scores[:, queries] = scores[:, queries].masked_fill((segment_of == n)[None, None, :], 0.0)
        earlier = torch.nonzero((segment_of < n) & (segment_of >= n - memory_segments)).flatten()[-memory:]
        for key in earlier.tolist():
            age = n - segment_of[key].item()
            scores[:, queries, key] = 0.0 if table is None else table[:, age - 1][:, None]
            if distance_table is not None:
                distance = torch.nonzero(queries).flatten() - key  # (Lq,)
                scores[:, queries, key] += distance_table[:, distance_bucket(distance)]
    hidden = backbone(input_ids=ids[None], position_ids=positions[None], attention_mask=scores[None]).last_hidden_state
    starts = torch.tensor([0, *torch.cumsum(torch.tensor([len(p) for p in pieces]), 0)[:-1].tolist()])
    return hidden[0, starts]  # (N, H)


@pytest.mark.parametrize("memory,memory_segments", [(SEGMENT + 2, 1), (5, 1), (20, 2)])
def test_recurrence_positions_and_memory_are_as_documented(tiny_backbone, memory, memory_segments):
    # Segment-local positions: every segment is embedded at positions 0..L-1, never further.
    seen = []
    hook = tiny_backbone.embeddings.position_embeddings.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    strategy = make(tiny_backbone, recurrence(memory=memory, memory_segments=memory_segments))
    randomize_memory_bias(strategy, same_for_every_layer=True)
    doc = documents(3 * SEGMENT + 4)[0]
    try:
        vectors = segment_vectors(tiny_backbone, strategy, doc)
    finally:
        hook.remove()
    assert [p.flatten().tolist() for p in seen] == [list(range(SEGMENT + 2))] * 3 + [list(range(6))]
    # Memory entries keep the positions they were read at; their age biases attention through the learned table.
    with torch.no_grad():
        expected = masked_reference(tiny_backbone, doc, memory, memory_segments, strategy.memory_bias[0])
    torch.testing.assert_close(vectors, expected, atol=1e-5, rtol=1e-5)


def test_rmt_memory_is_written_at_memory_positions_and_read_by_the_next_segment(tiny_backbone):
    torch.manual_seed(0)
    strategy = make(tiny_backbone, rmt())
    doc = documents(2 * SEGMENT + 5)[0]
    seen = []
    hook = tiny_backbone.embeddings.position_embeddings.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    try:
        vectors = segment_vectors(tiny_backbone, strategy, doc)
    finally:
        hook.remove()
    assert [p.flatten().tolist() for p in seen] == [list(range(SEGMENT + 5))] * 2 + [list(range(10))]
    memory = strategy.memory  # (M, H)
    embed = tiny_backbone.get_input_embeddings()
    with torch.no_grad():
        for n, start in enumerate(range(0, len(doc), SEGMENT)):
            tokens = embed(torch.tensor(wrapped(doc[start : start + SEGMENT])))
            hidden = tiny_backbone(inputs_embeds=torch.cat([tokens[:1], memory, tokens[1:]])[None]).last_hidden_state[0]
            torch.testing.assert_close(vectors[n], hidden[0], atol=1e-5, rtol=1e-5)
            memory = hidden[1:4]


# -- gradients -------------------------------------------------------------------------------------------------


def embedding_gradients(backbone, strategy, doc, loss_of_units) -> list[float]:
    """How much gradient reaches each segment's embeddings (0 where the segment was read without a graph)."""
    outputs = []

    def keep(module, inputs, output):
        if output.requires_grad:
            output.retain_grad()
        outputs.append(output)

    hook = backbone.embeddings.register_forward_hook(keep)
    try:
        units = strategy.encode(backbone, [doc])
        # A fixed random readout: the plain sum of a LayerNorm output has no gradient.
        readout = torch.randn(backbone.config.hidden_size, generator=torch.Generator().manual_seed(0))
        (loss_of_units(units, strategy) * readout).sum().backward()
    finally:
        hook.remove()
    return [0.0 if o.grad is None else o.grad.abs().sum().item() for o in outputs]


CONFIGS = {"recurrence": recurrence, "rmt": rmt}


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("backprop,reached", [(0, [False, False, True]), (1, [False, True, True]), (None, [True] * 3)])
def test_gradients_through_memory_flow_back_as_configured(tiny_backbone, name, backprop, reached):
    doc = documents(3 * SEGMENT)[0]
    torch.manual_seed(0)
    # Only the last segment is pooled, so earlier segments receive gradient through the memory alone.
    strategy = make(tiny_backbone, CONFIGS[name](backprop_segments=backprop, pooling="last"))
    grads = embedding_gradients(tiny_backbone, strategy, doc, lambda u, s: s.pool(u).vector)
    assert [g > 0 for g in grads] == reached
    if name == "recurrence":
        assert strategy.memory_bias.grad is not None and strategy.memory_bias.grad.abs().sum() > 0
    else:
        assert (strategy.memory.grad is not None and strategy.memory.grad.abs().sum() > 0) == (backprop is None)


@pytest.mark.parametrize("backprop", [0, None])
def test_recurrence_stopped_gradients_with_every_segment_in_the_graph(tiny_backbone, backprop):
    # Mean pooling builds a graph for every segment; the memory itself must still cut (or pass) the gradient.
    strategy = make(tiny_backbone, recurrence(backprop_segments=backprop, pooling="mean"))
    grads = embedding_gradients(tiny_backbone, strategy, documents(3 * SEGMENT)[0], lambda u, s: u.vectors[0, 2])
    assert [g > 0 for g in grads] == ([False, False, True] if backprop == 0 else [True, True, True])


# -- batches, padding, streaming -------------------------------------------------------------------------------


@pytest.mark.parametrize("config", [recurrence(memory=20, memory_segments=2), rmt()], ids=["recurrence", "rmt"])
def test_batch_composition_and_padding_do_not_change_a_document(tiny_backbone, config):
    torch.manual_seed(0)
    strategy = make(tiny_backbone, config)
    if isinstance(config, RecurrenceConfig):
        randomize_memory_bias(strategy)
    target = documents(3 * SEGMENT + 7, seed=3)[0]
    others = documents(6 * SEGMENT + 1, 5, 0, 2 * SEGMENT + 11, seed=4)
    with torch.no_grad():
        alone = strategy.encode(tiny_backbone, [target])
        for budget in (PassBudget(), PassBudget(max_windows=2)):  # also split into several passes per step
            strategy.budget = budget
            batch = strategy.encode(tiny_backbone, [others[0], others[1], target, others[2], others[3]])
            n = alone.vectors.shape[1]
            assert batch.mask[2].sum() == n
            torch.testing.assert_close(batch.vectors[2, :n], alone.vectors[0], atol=1e-5, rtol=1e-5)
            pooled, pooled_alone = strategy.pool(batch).vector[2], strategy.pool(alone).vector[0]
            torch.testing.assert_close(pooled, pooled_alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("config", [recurrence(memory=20, memory_segments=2), rmt()], ids=["recurrence", "rmt"])
def test_inference_keeps_no_activations_of_earlier_segments(tiny_backbone, config):
    strategy = make(tiny_backbone, config)
    layers = tiny_backbone.encoder.layer
    previous: list[weakref.ref] = []
    alive_at_step: list[int] = []

    def on_layer(module, inputs, output):
        previous.append(weakref.ref(output if torch.is_tensor(output) else output[0]))

    def on_step(module, inputs):
        alive_at_step.append(sum(ref() is not None for ref in previous))

    hooks = [layer.register_forward_hook(on_layer) for layer in layers]
    hooks.append(tiny_backbone.embeddings.register_forward_pre_hook(on_step))
    try:
        with torch.no_grad():
            units = strategy.encode(tiny_backbone, documents(16 * SEGMENT))
    finally:
        for hook in hooks:
            hook.remove()
    assert units.mask.sum() == 16 and len(alive_at_step) == 16
    assert alive_at_step == [0] * 16  # every layer output of a segment is gone when the next segment starts


# -- LoRA, save/load, mixed precision, recipes ------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [
    ["strategy.name=recurrence", "strategy.segment=20", "strategy.memory=22", "strategy.pooling=attention"],
    ["strategy.name=rmt", "strategy.segment=20", "strategy.memory_tokens=4"],
], ids=["recurrence", "rmt"])
def test_lora_model_saves_and_loads_with_identical_predictions(tiny_backbone_dir, tmp_path, strategy):
    from longbert.modeling.classifier import LongDocumentClassifier

    torch.manual_seed(0)
    recipe = load_recipe(None, [f"backbone.name={tiny_backbone_dir}", "model.finetune=lora", *strategy])
    model = LongDocumentClassifier.from_recipe(recipe, ["neg", "pos"])
    with torch.no_grad():  # make adapters and memory weights matter before saving them
        for name, p in model.named_parameters():
            if "lora_B" in name or name.startswith("strategy."):
                p.copy_(torch.randn_like(p) * 0.1)
    texts = ["a long review " * 30 + "that ends well", "short and bad", "the plot " * 50]
    before = model.predict(texts)
    model.save_pretrained(tmp_path / "model")
    loaded = LongDocumentClassifier.from_pretrained(tmp_path / "model")
    after = loaded.predict(texts)
    for x, y in zip(before, after):
        assert x["label"] == y["label"]
        for name in x["probabilities"]:
            assert x["probabilities"][name] == pytest.approx(y["probabilities"][name], abs=1e-6)
    # Loading adapted the backbone again (idempotently): the memory attention is in place under the adapter.
    if "strategy.name=recurrence" in strategy:
        assert loaded.backbone.get_base_model().config._attn_implementation == ATTENTION_NAME


def test_a_short_lora_bf16_training_run(tiny_recipe):
    from safetensors.torch import load_file

    import longbert

    overrides = [o for o in tiny_recipe if not o.startswith("strategy.")] + [
        "strategy.name=recurrence", "strategy.segment=30", "strategy.memory=32", "strategy.pooling=last",
        "model.finetune=lora", "train.mixed_precision=bf16", "train.epochs=1", "train.max_steps=3"]
    result = longbert.train(load_recipe(None, overrides))
    head = load_file(result.folder / "best" / "head.safetensors")
    assert "strategy.memory_bias" not in head  # off by default: the distance bias tells old from new
    assert (head["strategy.distance_bias"] != -3.0).any(), "the distance bias trains"
    model = longbert.LongDocumentClassifier.from_pretrained(result.folder)
    assert model.predict(["What a film. " * 40])[0]["label"] in ("neg", "pos")


@pytest.mark.parametrize("config", [recurrence(memory=20, memory_segments=2), rmt()], ids=["recurrence", "rmt"])
def test_bf16_autocast_forward_and_backward(tiny_backbone, config):
    torch.manual_seed(0)
    strategy = make(tiny_backbone, config)
    docs = documents(3 * SEGMENT + 2, 7)
    with torch.no_grad():
        reference = strategy.pool(strategy.encode(tiny_backbone, docs)).vector
    with torch.autocast("cpu", dtype=torch.bfloat16):
        vector = strategy.pool(strategy.encode(tiny_backbone, docs)).vector  # (B, H)
    assert torch.isfinite(vector).all()
    assert torch.nn.functional.cosine_similarity(vector.float(), reference, dim=-1).min() > 0.98
    vector.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in tiny_backbone.parameters() if p.grad is not None)


def test_config_problems_name_their_yaml_path():
    config = unchecked(RecurrenceConfig, segment=0, memory=-1, memory_segments=0, backprop_segments=-1, pooling="sum")
    problems = config.problems("strategy")
    for path in ("strategy.segment", "strategy.memory ", "strategy.memory_segments", "strategy.backprop_segments",
                 "strategy.pooling"):
        assert any(p.startswith(path.strip()) for p in problems), path
    (message,) = unchecked(RecurrenceConfig, segment=100, memory=300).problems("strategy")
    assert message.startswith("strategy.memory must be <= memory_segments * (segment + 2) = 102")
    assert unchecked(RmtConfig, memory_tokens=-1, token_pooling="max").problems("strategy") == [
        "strategy.token_pooling must be one of auto, cls, mean, got 'max'",
        "strategy.memory_tokens must be >= 0, got -1"]
    with pytest.raises(LongbertError, match="strategy.memory_segments"):
        load_recipe(None, ["strategy.name=recurrence", "strategy.memory_segments=0"])


def test_segments_must_fit_the_backbone_positions(tiny_backbone):
    with pytest.raises(LongbertError, match=r"strategy.segment \+ strategy.memory_tokens"):
        make(tiny_backbone, rmt(segment=120, memory_tokens=10))
    with pytest.raises(LongbertError, match="strategy.segment"):
        make(tiny_backbone, recurrence(segment=127))


# -- the distance bias --------------------------------------------------------------------------------------------


def test_distance_buckets_are_exact_when_near_and_logarithmic_when_far():
    from longbert.strategies.recurrence import DISTANCE_BUCKETS, DISTANCE_MAX, distance_bucket

    d = torch.arange(1, 3 * DISTANCE_MAX)
    b = distance_bucket(d)
    assert b[: DISTANCE_BUCKETS // 2 - 1].tolist() == list(range(1, DISTANCE_BUCKETS // 2))
    assert bool((b[1:] >= b[:-1]).all()) and int(b.max()) == DISTANCE_BUCKETS - 1
    assert int(distance_bucket(torch.tensor(DISTANCE_MAX))) == DISTANCE_BUCKETS - 1
    assert int(distance_bucket(torch.tensor(DISTANCE_MAX // 2))) < DISTANCE_BUCKETS - 1
    assert len(set(b.tolist())) == DISTANCE_BUCKETS - 1  # every bucket but 0 (distances start at 1) is used


@pytest.mark.parametrize("memory,memory_segments", [(SEGMENT + 2, 1), (20, 2)])
def test_the_distance_bias_counts_true_token_distance_across_segments(tiny_backbone, memory, memory_segments):
    """The memory's key at distance d from a query gets the layer's bias for d's bucket: the same as one plain pass
    over all segments side by side with that bias written into the attention mask."""
    strategy = make(tiny_backbone, recurrence(memory=memory, memory_segments=memory_segments, memory_bias=False,
                                              distance_bias=True))
    assert strategy.distance_bias.shape == (2, 4, 32) and bool((strategy.distance_bias == -3.0).all())
    with torch.no_grad():  # the same table in every layer, so a one-pass reference can hold it
        table = torch.randn(strategy.distance_bias.shape[1:], generator=torch.Generator().manual_seed(3))
        strategy.distance_bias.copy_(table.expand_as(strategy.distance_bias))
        doc = documents(3 * SEGMENT + 4)[0]
        vectors = segment_vectors(tiny_backbone, strategy, doc)
        expected = masked_reference(tiny_backbone, doc, memory, memory_segments, None, table)
    torch.testing.assert_close(vectors, expected, atol=1e-5, rtol=1e-5)


def test_a_very_negative_distance_bias_reads_every_segment_alone(tiny_backbone):
    """The bias moves the reading between chunk (memory ignored) and full memory: at -1e4 it is chunk's."""
    docs = documents(40, 25)
    alone = make(tiny_backbone, recurrence(memory=0))
    with torch.no_grad():
        expected = alone.encode(tiny_backbone, docs).vectors
        strategy = make(tiny_backbone, recurrence(memory_bias=False, distance_bias=True))
        strategy.distance_bias.fill_(-1e4)
        torch.testing.assert_close(strategy.encode(tiny_backbone, docs).vectors, expected, atol=1e-4, rtol=1e-4)
        strategy.distance_bias.fill_(-3.0)  # the starting value: memory counts, a little
        assert not torch.allclose(strategy.encode(tiny_backbone, docs).vectors, expected, atol=1e-4)


def test_streaming_hands_freed_memory_back_every_32_steps_without_gradients(monkeypatch):
    """Reading without gradients trims the heap every TRIM_EVERY_STEPS segments (else a 1M-token document grew the
    process to 2.4 GB); with gradients it never does (the graph holds the memory anyway)."""
    import longbert.strategies.segments as segments

    trims = []
    monkeypatch.setattr(segments, "trim_heap", lambda: trims.append(1) or True)

    def run_pass(pieces, memory):
        return torch.stack([p.float().mean(0, keepdim=True).expand(4) for p in pieces]), None  # (E, 4)

    documents = [torch.arange(70 * 5), torch.arange(10 * 5)]  # 70 and 10 segments of 5 tokens
    with torch.no_grad():
        units = segments.read_segments(documents, 5, PassBudget(), 0, False, run_pass, 0)
    assert units.vectors.shape == (2, 70, 4) and units.mask.sum().item() == 80
    assert len(trims) == 70 // segments.TRIM_EVERY_STEPS == 2
    trims.clear()
    segments.read_segments(documents, 5, PassBudget(), 0, False, run_pass, 0)
    assert trims == []
