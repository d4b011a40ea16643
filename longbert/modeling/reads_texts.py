"""How a model reads texts: `ReadsTexts`, the `predict` and `embed` every model that reads as the classifier does
shares (the classifier, its int8 wrapper), over one loop each gives (`read_as_done`); that loop's batches, tokenized
first and read longest first (`read_in_batches`, `longest_first`, shared with an exported folder's runtime); the check
of the texts; and the rows `predict` gives (`prediction_row`, `prediction_rows`), abstaining below a minimum
confidence when asked (`with_abstention`).

A leaf below the classifier and its int8 wrapper (`int8.py`), which both read texts this way: neither imports the other
for it.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from longbert.config import is_multi_label
from longbert.data.lengths import longest_first_order
from longbert.errors import LongbertError
from longbert.modeling.ensemble import refuse_ensemble
from longbert.modeling.settings import ModelSettings
from longbert.utils.checked import short_repr


class ReadsTexts:
    """`predict`, `predictions_as_done`, `embed` and `embeddings_as_done` over the subclass's `read_as_done(texts,
    batch_size, precision, compute)`: (index, compute(the model that runs, its batch)[row] as a list, full length) for
    every text. The subclass also has `settings`, `head` and `ensemble`."""

    def predict(self, texts: list[str], batch_size: int = 16, precision: str = "auto",
                min_confidence: float | None = None) -> list[dict]:
        """Texts -> one dict each, in the order of `texts`: {'label': name (or 'labels': [names] for multi-label),
        'probabilities': {name: p}, 'n_tokens': the text's full length with [CLS]/[SEP] (over max_document_tokens + 2:
        the text was cut)}. `precision`: fp32, bf16, or auto (bf16 where the model's device runs it fast).
        `min_confidence` (in (0, 1)): every row also says 'abstained', true where the text's `confidence` is below it,
        and then its label (labels) is None."""
        check_min_confidence(min_confidence)
        rows: list = [None] * len(texts)
        for index, row in self.predictions_as_done(texts, batch_size, precision, min_confidence):
            rows[index] = row
        return rows

    def predictions_as_done(self, texts: list[str], batch_size: int = 16, precision: str = "auto",
                            min_confidence: float | None = None) -> Iterator[tuple[int, dict]]:
        """(index into `texts`, the row `predict` gives it) for every text, batch by batch as each is computed.
        All texts are tokenized first and batched by length, longest first, so that a batch pads little and the
        biggest batch comes first; hence rows arrive out of order."""
        check_min_confidence(min_confidence)
        for index, p, length in self.read_as_done(texts, batch_size, precision, batch_probabilities):
            yield index, prediction_row(self.settings, p, length, min_confidence)

    def embed(self, texts: list[str], batch_size: int = 16, precision: str = "auto") -> torch.Tensor:
        """(N, H) float32: each text's document vector (the strategy's pooling of its units; the logits are
        head(vector)), for search, clustering or a classifier of one's own; any length, read as `predict` reads."""
        vectors: list = [None] * len(texts)
        for index, vector in self.embeddings_as_done(texts, batch_size, precision):
            vectors[index] = vector
        return torch.tensor(vectors, dtype=torch.float32).reshape(len(texts), self.head.in_features)

    def embeddings_as_done(self, texts: list[str], batch_size: int = 16,
                           precision: str = "auto") -> Iterator[tuple[int, list[float]]]:
        """(index into `texts`, its document vector) for every text, out of order as `predictions_as_done`."""
        refuse_ensemble(self, "this model", "it has one document vector per member, not one: embed a member")
        yield from ((index, vector) for index, vector, _ in
                    self.read_as_done(texts, batch_size, precision, batch_vectors))

    def read_as_done(self, texts: list[str], batch_size: int, precision: str,
                     compute: Callable) -> Iterator[tuple[int, list, int]]:
        """(index into `texts`, compute(the model that runs at `precision`, its batch)[row] as a list, the text's full
        length) for every text: the one loop of the methods above."""
        raise NotImplementedError


def longest_first(documents: list, batch_size: int) -> Iterator[list[int]]:
    """The indices of `documents` in batches of `batch_size`, longest documents first: a batch pads little, and the
    biggest batch comes first (`predictions_as_done` of a model and of an exported folder)."""
    order = longest_first_order([len(d) for d in documents])
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


def read_in_batches(model, texts: list[str], batch_size: int, autocast,
                    compute: Callable) -> Iterator[tuple[int, list, int]]:
    """(index into `texts`, compute(its batch of documents)[row] as a list, the text's full length) for every text:
    all texts tokenized by `model` first, then read in batches longest first (`longest_first`), without gradients,
    under `autocast`, with `model` in eval mode meanwhile. The loop of `predict` and `embed`, shared by every model
    that reads texts as the classifier does (its int8 wrapper too)."""
    documents, lengths = model.tokenize(texts)
    was_training = model.training
    model.eval()
    try:
        for batch in longest_first(documents, batch_size):
            with torch.no_grad(), autocast:
                values = compute([documents[i] for i in batch])  # (B, ...)
            for index, value in zip(batch, values.tolist()):
                yield index, value, lengths[index]
    finally:
        model.train(was_training)


def batch_probabilities(model, documents: list[torch.Tensor]) -> torch.Tensor:
    """(B, C): what `predict` reads of a batch, with the model that runs."""
    return model.probabilities(model(documents).logits)


def batch_vectors(model, documents: list[torch.Tensor]) -> torch.Tensor:
    """(B, H) float32: what `embed` reads of a batch (each document's pooled vector), with the model that runs."""
    return model.strategy.pool(model.encode(documents)).vector.float()


def check_texts(texts: list, batch_size: int = 1) -> None:
    """What `predict` accepts: every text a string with something in it, and a batch size of at least 1 (a
    LongbertError naming the first text that is not, or the batch size). A string given whole is refused, not read
    one character a text."""
    if isinstance(texts, (str, bytes)):
        raise LongbertError(f"texts must be a list of strings, got one {type(texts).__name__} "
                            f"({short_repr(texts, 40)}); pass [text] to predict one text")
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise LongbertError(f"text {row} is a {type(text).__name__} ({short_repr(text, 40)}), not a string")
        if not text.strip():
            raise LongbertError(f"text {row} is empty or whitespace-only")
    if batch_size < 1:
        raise LongbertError(f"batch_size must be >= 1, got {batch_size}")


def prediction_row(settings: ModelSettings, probabilities: list[float], n_tokens: int,
                   min_confidence: float | None = None) -> dict:
    """One text's class probabilities and full length -> `predict`'s row: {'label' (or 'labels', decided at the
    settings' thresholds), 'probabilities': {name: p}, 'n_tokens'}, and with `min_confidence` 'abstained'
    (`with_abstention`). Shared by every way of running a model."""
    row = {"probabilities": dict(zip(settings.label_names, probabilities)), **decision(settings, probabilities)}
    if min_confidence is not None:
        row = with_abstention(settings, row, min_confidence)
    row["n_tokens"] = n_tokens
    return row


def decision(settings: ModelSettings, probabilities: list[float]) -> dict:
    """One text's class probabilities -> {'label': the likeliest class}, or for multi-label {'labels': those at or
    above the settings' thresholds}: what the model answers, abstention aside."""
    names = settings.label_names
    if is_multi_label(settings.problem_type):
        thresholds = settings.thresholds or [0.5] * len(names)
        return {"labels": [n for n, q, t in zip(names, probabilities, thresholds) if q >= t]}
    return {"label": names[max(range(len(probabilities)), key=probabilities.__getitem__)]}


def confidence(settings: ModelSettings, probabilities: list[float]) -> float:
    """How sure the model is of one text's answer: single-label, its top probability; multi-label, its least sure
    label's max(p, 1 - p) (as `longbert.evaluation.reliability.coverage_curve` reads it)."""
    if is_multi_label(settings.problem_type):
        return min(max(p, 1 - p) for p in probabilities)
    return max(probabilities)


def with_abstention(settings: ModelSettings, row: dict, min_confidence: float) -> dict:
    """A `prediction_row` with 'abstained': true, and its label (labels) None, where its `confidence` is below
    `min_confidence`, else false; its probabilities stay. A new dict (serve decides each request's rows apart)."""
    abstained = confidence(settings, list(row["probabilities"].values())) < min_confidence
    key = "labels" if is_multi_label(settings.problem_type) else "label"
    return {**row, **({key: None} if abstained else {}), "abstained": abstained}


def check_min_confidence(value, name: str = "min_confidence") -> None:
    """None, or a number in (0, 1): anything else is one LongbertError line naming `name`."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1):
        raise LongbertError(f"{name} must be a number in (0, 1), got {value!r}")


def prediction_rows(settings: ModelSettings, probabilities: torch.Tensor, lengths: list[int]) -> list[dict]:
    """(B, C) probabilities and each text's full length -> B rows (`prediction_row`)."""
    return [prediction_row(settings, p, n) for p, n in zip(probabilities.tolist(), lengths)]
