"""The int8 model on the CPU: `Int8Model` wraps a model and a copy of it whose backbone Linear layers are dynamically
quantized (`quantized_copy`); the copy reads, and the few documents whose decision was close are read again by the
model itself, in fp32 (`Int8Model.recheck_close_calls`), so that int8's labels stay fp32's.

It is a model beside the classifier, as the ensemble is (`modeling/ensemble.py`): the classifier's forward knows
nothing of it, and `LongDocumentClassifier.for_precision("int8")` only hands out the wrapper (made at first use, kept
outside its module tree), which reads as the classifier does (`forward`, `predict`, `embed`), always at int8. It sits
in modeling/, not inference/, because the classifier's own `predict(precision="int8")` runs it and modeling imports
nothing from the rooms above it. What measures it is inference's: `longbert quantize` chooses the recheck gap on the
model's validation split (longbert.inference.quantize), and explain reads inside it (longbert.inference.explain).
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Callable, Iterator

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.modeling.reads_texts import ReadsTexts, check_texts, read_in_batches
from longbert.utils.hardware import autocast_for

if TYPE_CHECKING:
    from longbert.modeling.classifier import ClassifierOutput, LongDocumentClassifier
    from longbert.modeling.settings import ModelSettings
    from longbert.strategies.base import Units

# int8's close calls (`Int8Model.recheck_close_calls`): a model that `longbert quantize` has not measured reads none
# again (gap 0): the gap is chosen per model, on its own validation split.
DEFAULT_RECHECK_GAP = 0.0
RECHECK_GAPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0)


def int8_recheck_gap(model: LongDocumentClassifier) -> float:
    """The gap `longbert quantize` chose for `model` on its validation split, else DEFAULT_RECHECK_GAP."""
    measured = (model.training_facts.int8 or {}) if model.training_facts is not None else {}
    return float(measured.get("recheck_gap", DEFAULT_RECHECK_GAP))


def close_calls(probabilities: torch.Tensor, multi_label: bool, thresholds: list[float], gap: float) -> torch.Tensor:
    """(B, C) probabilities -> (B,) True where the decision is close: the top two classes less than `gap` apart, or
    for multi-label any label within gap / 2 of its threshold (the same distance for two labels at 0.5)."""
    if multi_label:
        return ((probabilities - probabilities.new_tensor(thresholds)).abs() < gap / 2).any(1)
    top = probabilities.topk(2, dim=1).values  # (B, 2)
    return top[:, 0] - top[:, 1] < gap


def quantized_copy(model: LongDocumentClassifier) -> LongDocumentClassifier:
    """A copy of `model` for int8 inference on the CPU: LoRA merged into the weights it wraps, then every Linear layer
    of the backbone (attention projections, feed-forward) replaced by torch's dynamically quantized one (int8 weights
    per output channel, activations quantized per batch). Everything else stays fp32: embeddings, attention scores and
    softmax, LayerNorm, GELU, the strategy's own layers and the head (of an ensemble: of every member). The copy is a
    plain classifier in eval mode; re-reading its close calls is `Int8Model`'s."""
    try:  # deprecated by torch in favour of torchao, which measured slower here (benchmarks/log.md, int8 on the CPU)
        from torch.ao.quantization import (  # noqa: PLC0415 (deprecated: torch deprecates it; int8 alone needs it)
            per_channel_dynamic_qconfig,
            quantize_dynamic,
        )
    except ImportError as error:
        raise LongbertError(f"precision int8 needs torch.ao.quantization.quantize_dynamic, which torch "
                            f"{torch.__version__} does not have ({error}): use precision fp32 or bf16, or a torch "
                            "that still has it") from None

    copied = copy.deepcopy(model).cpu().eval()
    members = [copied] if copied.ensemble is None else copied.ensemble.members(copied)  # an ensemble: every member's
    for member in members:
        if member.settings.trains_lora:
            member.backbone = member.backbone.merge_and_unload()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch points at torchao for new code; its dynamic quantization runs
            # Per output channel: torch's default for a bare {nn.Linear} is one scale per weight matrix (per tensor).
            member.backbone = quantize_dynamic(member.backbone, {nn.Linear: per_channel_dynamic_qconfig},
                                               dtype=torch.qint8)
    copied.requires_grad_(False)
    return copied


class Int8Model(ReadsTexts, nn.Module):
    """`exact` at int8 on the CPU: its quantized copy (`quantized`, `quantized_copy`) reads every document, and
    `exact` reads again, in fp32, those whose decision was closer than `recheck_gap` (None: `int8_recheck_gap(exact)`;
    0: none). It reads as the classifier does (`forward`, `predict`, `predictions_as_done`, `embed`,
    `embeddings_as_done`), always at int8: whatever precision it is asked, no bf16 autocast feeds its quantized
    layers, so `model.for_precision("int8").predict(texts)` runs int8 on a CPU where auto means bf16."""

    def __init__(self, exact: LongDocumentClassifier, recheck_gap: float | None = None):
        super().__init__()
        self.quantized = quantized_copy(exact)
        # Outside the module tree (as the classifier keeps this wrapper outside its own): the wrapper's eval(), to()
        # and parameters() leave the exact model as it is.
        object.__setattr__(self, "exact", exact)
        self.recheck_gap = int8_recheck_gap(exact) if recheck_gap is None else recheck_gap
        self.eval()  # as its copy: a pass that restores the mode it found must not switch the copy's dropout on

    # -- what it reads with: the quantized copy's -----------------------------------------------------------------

    @property
    def settings(self) -> ModelSettings:
        return self.quantized.settings

    @property
    def label_names(self) -> list[str]:
        return self.quantized.label_names

    @property
    def multi_label(self) -> bool:
        return self.quantized.multi_label

    @property
    def thresholds(self) -> list[float]:
        return self.quantized.thresholds

    @property
    def head(self) -> nn.Linear:
        return self.quantized.head

    @property
    def ensemble(self):
        """The quantized copy's ensemble (None for a single model): `embed` refuses one, as the classifier does."""
        return self.quantized.ensemble

    @property
    def tokenizer(self):
        return self.quantized.tokenizer

    @property
    def strategy(self):
        """The quantized copy's strategy: with `encode`, what a document vector is read with."""
        return self.quantized.strategy

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        return self.quantized.tokenize(texts)

    def encode(self, documents: list[torch.Tensor]) -> Units:
        """The quantized copy's units (B, N, H): a document vector has no close call to read again."""
        return self.quantized.encode(documents)

    def probabilities(self, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
        return self.quantized.probabilities(logits, calibrated)

    def for_precision(self, precision: str, recheck_gap: float | None = None) -> Int8Model:
        """This wrapper, at any precision (it is its own int8 model); `recheck_gap`, when given, becomes its gap."""
        if recheck_gap is not None:
            self.recheck_gap = recheck_gap
        return self

    # -- running ----------------------------------------------------------------------------------------------

    def forward(self, documents: list[torch.Tensor] | None = None, units: Units | None = None) -> ClassifierOutput:
        """The quantized copy's output (`LongDocumentClassifier.forward`), its close calls' logits replaced by the
        exact model's (`recheck_close_calls`); cached `units` come without documents, and nothing is read again."""
        out = self.quantized(documents, units)
        if documents is not None:
            out.logits = self.recheck_close_calls(out.logits, documents)
        return out

    def recheck_close_calls(self, logits: torch.Tensor, documents: list[torch.Tensor]) -> torch.Tensor:
        """The quantized copy's (B, C) logits, with those of its close calls (`close_calls` at `recheck_gap`) replaced
        by the exact model's on the same documents: quantization moves probabilities by a few hundredths, which flips
        a label only where the classes were that close, so re-reading those few in fp32 keeps int8's labels fp32's."""
        if self.recheck_gap <= 0:
            return logits
        # What the model answers (calibrated when it is) against its thresholds (set on those same probabilities), as
        # `longbert quantize` chose the gap on; a temperature keeps each document's order of classes, so its labels.
        close = close_calls(self.probabilities(logits), self.multi_label, self.thresholds, self.recheck_gap)  # (B,)
        if not close.any():
            return logits
        again = self.exact([documents[i] for i in close.nonzero().flatten().tolist()]).logits  # (K, C)
        logits = logits.clone()
        logits[close] = again.to(logits.device, logits.dtype)
        return logits

    # Reading texts: the classifier's own methods (`ReadsTexts`: same rows, same order, same refusal of an ensemble's
    # embed), whose one loop, `read_as_done`, runs here at int8 whatever precision they are given.

    def read_as_done(self, texts: list[str], batch_size: int, precision: str,
                     compute: Callable) -> Iterator[tuple[int, list, int]]:
        """(index, compute(self, its batch)[row] as a list, full length), read with autocast off (int8's), whatever
        `precision` says: no bf16 autocast may feed the quantized layers."""
        check_texts(texts, batch_size)
        autocast = autocast_for(self, "int8")
        yield from read_in_batches(self, texts, batch_size, autocast, lambda documents: compute(self, documents))
