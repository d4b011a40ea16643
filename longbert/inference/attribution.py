"""Error analysis for the comparison report: long test documents that one strategy gets right and another gets
wrong, the part of each document that decided each strategy's prediction, and text excerpts that highlight it.

    chosen = select_examples(predictions, long_tokens, limit)             # which documents
    decisive = decisive_units(model, test, predictions[s], indices)       # per strategy, with its model loaded
    examples = build_examples(chosen, predictions, decisive, test, tokenizer, label_names)

Token spans are [start, end) indices of content tokens (0-based, [CLS]/[SEP] not counted), as a strategy's
`unit_spans` hook gives them (see strategies/base.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from longbert.data.lengths import LONG_TOKENS
from longbert.evaluation.predictions import PredictionRow
from longbert.strategies.base import Units, WeighsUnits, unit_spans
from longbert.utils.hardware import autocast_for

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")


def select_examples(predictions: dict[str, list[PredictionRow]], long_tokens: int = LONG_TOKENS,
                    limit: int = 6) -> list[dict]:
    """Pick up to `limit` long test documents on which the strategies disagree.

    For every ordered pair (A right, B wrong) the candidates are B's most confident mistakes; pairs take turns so
    each pair gets examples before any gets many. Returns [{index, right: A, wrong: B}] in the order chosen."""
    names = list(predictions)
    if len(names) < 2 or limit < 1:
        return []
    rows = [predictions[s] for s in names]
    n = len(rows[0])
    same_documents = all(len(r) == n and all(r[i].n_tokens == rows[0][i].n_tokens for i in range(n))
                         for r in rows)
    if not same_documents:
        return []  # the runs did not see the same test documents: nothing to compare document by document
    queues = {}
    for a in names:
        for b in names:
            if a == b:
                continue
            pa, pb = predictions[a], predictions[b]
            found = [i for i in range(n) if pa[i].n_tokens > long_tokens and pa[i].right and not pb[i].right]
            found.sort(key=lambda i: (-max(pb[i].probabilities), i))  # the most confident mistakes first
            queues[(a, b)] = found
    chosen, seen = [], set()
    while len(chosen) < limit and any(queues.values()):
        for (a, b), queue in queues.items():
            while queue and queue[0] in seen:
                queue.pop(0)
            if queue and len(chosen) < limit:
                i = queue.pop(0)
                seen.add(i)
                chosen.append({"index": i, "right": a, "wrong": b})
    return chosen


@dataclass(frozen=True)
class Reading:
    """What `decisive_units` needs of one document's prediction: a PredictionRow has both fields, and explain, which
    has no prediction file, gives these two."""

    predicted: int | list[int]
    unit_weights: list[float] | None


def decisive_units(model, test, predictions: list[PredictionRow | Reading], indices: list[int]) -> dict[int, dict]:
    """For each chosen document index: which unit (chunk, window, segment) decided most, and how that was measured:
    {method: 'kept' | 'weight' | 'occlusion' | None, unit, units, value, spans: [[start, end), ...]} (with a `note`
    instead when method is None). `test` is the tokenized test split, `predictions` this model's rows for it.

    With pooling weights that depend on the content (attention, max) it is the unit that weighed most. With mean
    pooling, whose weights say only how many tokens each unit adds, it is the unit whose removal lowers the
    probability of the predicted class most (occlusion: the backbone runs once, the pooler and head once per unit).
    A strategy with one unit reports the tokens it kept. Unit token ranges come from the strategy's `unit_spans`
    hook, whether its weights follow content from its `weights_carry_content` hook (see strategies/base.py)."""
    strategy = model.strategy
    content_weights = not isinstance(strategy, WeighsUnits) or strategy.weights_carry_content()

    out = {}
    for i in indices:
        ids = test[i]["input_ids"]
        units = unit_spans(model.strategy, len(ids))
        row = predictions[i]
        if units is None:
            out[i] = {"method": None, "note": "this strategy does not say which tokens its units cover (unit_spans)"}
            continue
        if len(units) == 1:
            out[i] = {"method": "kept", "unit": 0, "units": 1, "spans": [list(r) for r in units[0]]}
            continue
        weights = row.unit_weights
        weighed = weights is not None and len(weights) == len(units) and max(weights) - min(weights) > 1e-3
        if content_weights and weighed:
            unit = max(range(len(weights)), key=weights.__getitem__)
            out[i] = {"method": "weight", "unit": unit, "units": len(units), "value": float(weights[unit]),
                      "spans": [list(r) for r in units[unit]]}
            continue
        if isinstance(row.predicted, list):
            out[i] = {"method": None, "note": "mean pooling; occlusion is not done for multi-label runs"}
            continue
        drops = _occlusion(model, ids, row.predicted)
        if drops is None or len(drops) != len(units):
            out[i] = {"method": None, "note": "the model's units do not match the recomputed chunks"}
            continue
        unit = max(range(len(drops)), key=drops.__getitem__)
        out[i] = {"method": "occlusion", "unit": unit, "units": len(units), "value": float(drops[unit]),
                  "spans": [list(r) for r in units[unit]]}
    return out


def _occlusion(model, ids: list[int], predicted: int) -> list[float] | None:
    """How much the probability of `predicted` drops when each unit is left out of the pooling: (N,) floats."""
    device = next(model.parameters()).device
    with torch.no_grad(), autocast_for(model):
        units = model.encode([torch.tensor(ids, dtype=torch.long, device=device)])  # (1, N, H)
        n = units.vectors.shape[1]
        if n < 2:
            return None
        full = model.probabilities(model(units=units).logits)[0, predicted]
        vectors = units.vectors.expand(n, -1, -1).contiguous()  # (N, N, H): row i is the document ...
        mask = units.mask.expand(n, -1) & ~torch.eye(n, dtype=torch.bool, device=device)  # ... without unit i
        sizes = None if units.sizes is None else units.sizes.expand(n, -1)  # (N, N)
        without = model.probabilities(model(units=Units(vectors, mask, sizes)).logits)[:, predicted]  # (N,)
    return (full - without).float().cpu().tolist()


def excerpt(text: str, offsets: list[tuple[int, int]], span: tuple[int, int], context: int = 24,
            head: int = 60, tail: int = 20) -> list[dict]:
    """The text around token span [start, end) as segments [{text, highlight}], shortened: `context` tokens
    either side, and a long span shown as its first `head` and last `tail` tokens."""
    start, end = span
    total = len(offsets)
    end = min(end, total)
    if start >= end:
        return []
    # HTML line breaks (IMDb has many) become spaces of the same length, so the token offsets still hold.
    text = _BREAK.sub(lambda m: " " * len(m.group()), text)

    def word_start(at: int) -> int:  # a unit that starts inside a word (a WordPiece "##" piece) shows it whole
        while at > 0 and text[at - 1].isalnum():
            at -= 1
        return at

    def word_end(at: int) -> int:
        while at < len(text) and text[at].isalnum():
            at += 1
        return at

    def chars(a: int, b: int) -> str:  # text of tokens [a, b), widened to whole words
        return text[word_start(offsets[a][0]) : word_end(offsets[b - 1][1])] if a < b else ""

    before_from = max(0, start - context)
    after_to = min(total, end + context)
    low, high = word_start(offsets[start][0]), word_end(offsets[end - 1][1])
    segments = []
    prefix = "… " if before_from > 0 else ""
    # Gaps between tokens (spaces) belong to the text before the next token.
    segments.append({"text": prefix + text[min(offsets[before_from][0], low) : low], "highlight": False})
    if end - start > head + tail:
        segments.append({"text": chars(start, start + head), "highlight": True})
        segments.append({"text": f" … [{end - start - head - tail} tokens] … ", "highlight": False})
        segments.append({"text": chars(end - tail, end), "highlight": True})
    else:
        segments.append({"text": text[low:high], "highlight": True})
    after = text[high : offsets[after_to - 1][1]] if end < after_to else ""
    segments.append({"text": after + (" …" if after_to < total else ""), "highlight": False})
    for previous, segment in zip([None, *segments], segments):
        segment["text"] = _SPACES.sub(" ", segment["text"])
        if previous and previous["text"].endswith(" ") and segment["text"].startswith(" "):
            segment["text"] = segment["text"][1:]
    return [s for s in segments if s["text"]]


def token_offsets(tokenizer, text: str, ids: list[int]) -> list[tuple[int, int]] | None:
    """Character offsets of each content token, when the tokenizer gives them and they match the stored ids."""
    if not getattr(tokenizer, "is_fast", False):
        return None
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if encoded["input_ids"][: len(ids)] != list(ids):
        return None
    return [tuple(o) for o in encoded["offset_mapping"][: len(ids)]]


def decisive_excerpt(text: str, ids: list[int], decisive: dict | None, tokenizer,
                     offsets: list[tuple[int, int]] | None = None, whole: bool = False) -> list[dict] | None:
    """The excerpt (segments [{text, highlight}], see `excerpt`) around the unit `decisive_units` chose, or None when
    it chose none among several units. `offsets`: `token_offsets(tokenizer, text, ids)`, when already known.
    `whole`: the unit in full (explain's page), not its head and tail (the comparison report's many examples)."""
    if not decisive or decisive.get("method") not in ("weight", "occlusion"):
        return None
    start, end = decisive["spans"][0]
    offsets = offsets if offsets is not None else token_offsets(tokenizer, text, ids)
    if offsets is not None:
        return excerpt(text, offsets, (start, end), head=end - start if whole else 60)
    return [{"text": tokenizer.decode(ids[start:end]), "highlight": True}]  # a slow tokenizer: decode the tokens


def _label_text(value, label_names: list[str]) -> str:
    if isinstance(value, list):
        return ", ".join(n for n, v in zip(label_names, value) if v) or "(none)"
    return label_names[value]


def build_examples(chosen, predictions, decisive, test, tokenizer, label_names) -> list[dict]:
    """The error-analysis entries of results.json: per document, every strategy's prediction and decisive part,
    with text excerpts (highlighted segments) for strategies that chose among several units.

    chosen: what `select_examples` returned; predictions: strategy -> rows; decisive: strategy -> what
    `decisive_units` returned; test: the tokenized test split (columns text, input_ids) and `tokenizer` the one
    that tokenized it (its offsets place the highlighted tokens in the text)."""
    out = []
    for choice in chosen:
        i = choice["index"]
        row0 = predictions[choice["right"]][i]
        text, ids = test[i]["text"], test[i]["input_ids"]
        offsets = token_offsets(tokenizer, text, ids)
        per = {}
        for strategy, rows in predictions.items():
            row = rows[i]
            entry = {
                "predicted": _label_text(row.predicted, label_names),
                "correct": row.right,
                "probability_of_truth": None if isinstance(row.label, list) else row.probabilities[row.label],
                "decisive": decisive.get(strategy, {}).get(i),
                "excerpt": None,
            }
            entry["excerpt"] = decisive_excerpt(text, ids, entry["decisive"], tokenizer, offsets)
            per[strategy] = entry
        out.append({
            "index": i,
            "n_tokens": row0.n_tokens,
            "read_tokens": len(ids),  # content tokens after data.max_document_tokens
            "label": _label_text(row0.label, label_names),
            "right": [s for s in predictions if predictions[s][i].right],
            "wrong": [s for s in predictions if not predictions[s][i].right],
            "chosen_as": {"right": choice["right"], "wrong": choice["wrong"]},
            "strategies": per,
        })
    return out


def decisive_text(decisive: dict | None) -> str:
    """The part of a document that decided a prediction (an error-analysis entry's `decisive`), in words."""
    if not decisive or decisive.get("method") is None:
        return (decisive or {}).get("note", "n/a")
    ranges = " + ".join(f"tokens {a + 1:,}–{b:,}" for a, b in decisive["spans"])  # 1-based, inclusive
    if decisive["method"] == "kept":
        return f"saw only {ranges}"
    what = f"unit {decisive['unit'] + 1} of {decisive['units']} ({ranges})"
    if decisive["method"] == "weight":
        return f"{what}, pooling weight {decisive['value']:.2f}"
    return f"{what}; leaving it out lowers p(predicted) by {decisive['value']:.3f}"
