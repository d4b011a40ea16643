"""compare's error analysis on its own: which long documents are chosen, which part of each decided each strategy's
prediction (for every registered strategy), and the excerpts that highlight it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset

from helpers import build_model, random_documents
from longbert.comparison.report_numbers import read_predictions
from longbert.evaluation.evaluate import write_predictions
from longbert.evaluation.predictions import PredictionRow
from longbert.evaluation.split_pass import predict_dataset
from longbert.inference.attribution import decisive_units, excerpt, select_examples
from longbert.strategies.base import PassBudget, SpecialTokens, unit_spans
from longbert.strategies.configs import ChunkConfig, RecurrenceConfig, RmtConfig, SlidingConfig, TruncateConfig
from longbert.strategies.registry import build_strategy, strategy_names
from longbert.strategies.truncate import keep
from longbert.strategies.windows import split_windows


def _row(n_tokens, label, predicted, confidence=0.9):
    probabilities = [confidence, 1 - confidence] if predicted == 0 else [1 - confidence, confidence]
    return PredictionRow(index=0, n_tokens=n_tokens, label=label, predicted=predicted, probabilities=probabilities)


def test_examples_are_long_disagreements_most_confident_mistakes_first_pairs_taking_turns():
    predictions = {
        "a": [_row(900, 1, 1), _row(900, 1, 1), _row(300, 1, 1), _row(900, 0, 1), _row(900, 0, 0)],
        "b": [_row(900, 1, 0, 0.6), _row(900, 1, 0, 0.95), _row(300, 1, 0), _row(900, 0, 0), _row(900, 0, 0)],
    }
    chosen = select_examples(predictions, long_tokens=512, limit=6)
    # 2 is short and 4 is right for both: never chosen. b's most confident mistake (1) comes before 0.
    assert chosen == [{"index": 1, "right": "a", "wrong": "b"}, {"index": 3, "right": "b", "wrong": "a"},
                      {"index": 0, "right": "a", "wrong": "b"}]
    assert select_examples(predictions, limit=1) == chosen[:1]
    assert select_examples({"a": predictions["a"]}) == []


def _strategy(config):
    return build_strategy(config, 32, SpecialTokens(101, 102, 0), PassBudget())


def test_unit_spans_are_the_windows_the_strategies_cut():
    for config, length in ((ChunkConfig(window=50), 173), (SlidingConfig(window=50, stride=20), 173),
                           (ChunkConfig(window=50), 50)):
        windows = split_windows(torch.arange(length), config.window, config.stride)  # chunk's stride: its window
        assert unit_spans(_strategy(config), length) == [[(int(w[0]), int(w[-1]) + 1)] for w in windows]
    truncate = TruncateConfig(max_tokens=100, head_tokens=30)
    (kept,) = unit_spans(_strategy(truncate), 400)
    assert kept == [(0, 30), (330, 400)]
    assert sum(b - a for a, b in kept) == len(keep(torch.arange(400), truncate))


@pytest.mark.parametrize("config", [ChunkConfig(window=30, token_pooling="cls"),
                                    SlidingConfig(window=30, stride=10, token_pooling="cls"),
                                    TruncateConfig(max_tokens=30, head_tokens=10, token_pooling="cls")],
                         ids=lambda c: c.name)
def test_unit_spans_match_the_units_the_model_reads(config, tiny_backbone, tokenizer):
    strategy = build_strategy(config, tiny_backbone.config.hidden_size, SpecialTokens.from_tokenizer(tokenizer),
                              PassBudget())
    for length in (1, 30, 31, 95):
        units = strategy.encode(tiny_backbone, [torch.arange(1000, 1000 + length)])  # (1, N, H)
        assert len(unit_spans(strategy, length)) == int(units.mask.sum())


def test_unit_spans_of_segment_strategies_are_consecutive_segments():
    for config in (RecurrenceConfig(segment=50, memory=0), RmtConfig(segment=50, memory_tokens=0)):
        assert unit_spans(_strategy(config), 120) == [[(0, 50)], [(50, 100)], [(100, 120)]]
    assert unit_spans(torch.nn.Identity(), 120) is None


def test_excerpt_highlights_exactly_the_decisive_tokens(tokenizer):
    text = " ".join(f"word{i}" for i in range(200))
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    offsets = encoded["offset_mapping"]
    span = (40, 60)
    segments = excerpt(text, offsets, span, context=5, head=100)
    marked = "".join(s["text"] for s in segments if s["highlight"])
    assert marked == tokenizer.decode(encoded["input_ids"][40:60]).replace(" ##", "")
    assert segments[0]["text"].startswith("… ") and segments[-1]["text"].endswith(" …")
    long = excerpt(text, offsets, (0, len(offsets)), head=10, tail=5)
    assert [s["highlight"] for s in long] == [True, False, True]


def test_an_evaluation_reads_longest_first_and_answers_in_the_splits_order(tiny_backbone_dir):
    model = build_model(tiny_backbone_dir, "chunk")
    lengths = [20, 300, 5, 170, 95, 40]
    documents = random_documents(lengths, seed=4)
    split = Dataset.from_dict({"input_ids": [d.tolist() for d in documents], "labels": [0, 1, 1, 0, 1, 0],
                               "n_tokens": [n + 2 for n in lengths]})
    seen = []
    hook = model.register_forward_pre_hook(lambda m, a, k: seen.append([len(d) for d in k["documents"]]),
                                           with_kwargs=True)
    raw = predict_dataset(model, split, batch_size=2)
    hook.remove()
    assert seen == [[300, 170], [95, 40], [20, 5]], "batches of similar length, the longest first"
    assert raw["labels"].tolist() == [0, 1, 1, 0, 1, 0]
    alone = [predict_dataset(model, split.select([i]), batch_size=1)["probabilities"][0] for i in range(len(lengths))]
    assert raw["probabilities"] == pytest.approx(np.stack(alone), abs=1e-5)
    assert [len(w) for w in raw["unit_weights"]] == [1, 8, 1, 5, 3, 1], "its own 40-token chunks, in its place"


# Long for the tiny backbone (128 positions): several chunks, windows or segments, and more than bigbird reads.
DOCUMENT_LENGTHS = [300, 170, 95]


@pytest.mark.parametrize("name", strategy_names())
def test_every_strategy_says_which_part_of_a_long_document_decided(name, tiny_backbone_dir, tmp_path):
    model = build_model(tiny_backbone_dir, name)
    documents = random_documents(DOCUMENT_LENGTHS, seed=3)
    test = Dataset.from_dict({"input_ids": [d.tolist() for d in documents], "labels": [0, 1, 0],
                              "n_tokens": [n + 2 for n in DOCUMENT_LENGTHS]})
    # The prediction rows as a run writes them and compare reads them back.
    raw = predict_dataset(model, test, batch_size=2)
    write_predictions(tmp_path / "predictions-test.jsonl", test, raw, model.label_names, model.multi_label)
    rows = read_predictions(tmp_path)

    decisive = decisive_units(model, test, rows, list(range(len(DOCUMENT_LENGTHS))))
    for i, length in enumerate(DOCUMENT_LENGTHS):
        found = decisive[i]
        assert found["method"] in ("kept", "weight", "occlusion"), found.get("note")
        units = unit_spans(model.strategy, length)
        assert found["units"] == len(units) and 0 <= found["unit"] < len(units)
        assert found["spans"] == [list(span) for span in units[found["unit"]]]
        assert found["spans"] and all(0 <= start < end <= length for start, end in found["spans"])
        if found["method"] == "kept":
            assert len(units) == 1
        if found["method"] == "weight":  # the unit that weighed most in the pooling
            weights = rows[i].unit_weights
            assert found["value"] == max(weights) and len(weights) == len(units)


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_the_strategys_hook_says_whether_its_weights_tell_which_unit_decided(pooling, tiny_backbone_dir,
                                                                            monkeypatch):
    """Mean pooling's weights only count tokens, so the decisive unit is found by occlusion; learned attention's
    follow content, so the heaviest unit decided. The strategy's `weights_carry_content` hook says which, whatever
    its pooler is."""
    model = build_model(tiny_backbone_dir, "chunk", [f"strategy.pooling={pooling}"])
    document = random_documents([95], seed=5)[0]  # windows of 40: 3 units
    # Unequal weights, as either pooling gives them (mean by new tokens: 40, 40, 15); the heaviest is unit 1.
    test = [{"input_ids": document.tolist()}]
    rows = [PredictionRow(index=0, n_tokens=97, label=1, probabilities=[0.1, 0.9], predicted=1,
                          unit_weights=[0.2, 0.5, 0.3])]
    found = lambda: decisive_units(model, test, rows, [0])[0]
    assert found()["method"] == {"mean": "occlusion", "attention": "weight"}[pooling]
    monkeypatch.setattr(type(model.strategy), "weights_carry_content", lambda self: pooling == "mean")
    assert found()["method"] == {"mean": "weight", "attention": "occlusion"}[pooling]
    assert found()["unit"] == 1 if pooling == "mean" else found()["units"] == 3


def test_a_unit_that_starts_or_ends_inside_a_word_is_highlighted_as_whole_words(tokenizer):
    text = "the film was impossible to decipher yet wonderful"
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    pieces = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    inner = [i for i, piece in enumerate(pieces) if piece.startswith("##")]
    assert inner, pieces  # "decipher" is cut into pieces
    first, last = inner[0], inner[0]  # a unit holding a word's second piece only
    segments = excerpt(text, encoded["offset_mapping"], (first, last + 1), context=3, head=100)
    marked = "".join(s["text"] for s in segments if s["highlight"])
    word = next(w for w in text.split() if marked in w or w in marked)
    assert marked == word and "".join(s["text"] for s in segments).replace("… ", "").replace(" …", "") in text
