"""int8 inference on the CPU: a copy of a model whose backbone Linear layers are dynamically quantized, and the
re-reading in fp32 of the few documents whose decision was close (`recheck_close_calls`), so that int8's labels stay
fp32's. `LongDocumentClassifier.for_precision("int8")` makes the copy at first use; `longbert quantize` measures the
agreement and chooses the gap on the model's validation split (longbert.inference.quantize)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from longbert.modeling.classifier import LongDocumentClassifier

# int8's close calls (`recheck_close_calls`): a model that `longbert quantize` has not measured reads none again (gap
# 0): the gap is chosen per model, on its own validation split.
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


def recheck_close_calls(int8: LongDocumentClassifier, logits: torch.Tensor,
                        documents: list[torch.Tensor]) -> torch.Tensor:
    """An int8 copy's (B, C) logits, with those of its close calls (`close_calls` at the copy's gap) replaced by the
    exact model's on the same documents: quantization moves probabilities by a few hundredths, which flips a label
    only where the classes were that close, so re-reading those few in fp32 keeps int8's labels fp32's."""
    gap = int8.__dict__.get("_recheck_gap", 0.0)
    if gap <= 0:
        return logits
    close = close_calls(int8.probabilities(logits), int8.multi_label, int8.thresholds, gap)  # (B,)
    if not close.any():
        return logits
    exact: LongDocumentClassifier = int8.__dict__["_exact"]
    again = exact([documents[i] for i in close.nonzero().flatten().tolist()]).logits  # (K, C)
    logits = logits.clone()
    logits[close] = again.to(logits.device, logits.dtype)
    return logits


def quantized_copy(model: LongDocumentClassifier, recheck_gap: float | None = None) -> LongDocumentClassifier:
    """A copy of `model` for int8 inference on the CPU: LoRA merged into the weights it wraps, then every Linear layer
    of the backbone (attention projections, feed-forward) replaced by torch's dynamically quantized one (int8 weights
    per output channel, activations quantized per batch). Everything else stays fp32: embeddings, attention scores and
    softmax, LayerNorm, GELU, the strategy's own layers and the head (of an ensemble: of every member). The copy
    keeps `model` (outside its module tree) to re-read its close calls in fp32 (`recheck_close_calls`) at
    `recheck_gap` (None: `int8_recheck_gap(model)`; 0: never)."""
    import warnings

    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    copied = copy.deepcopy(model).cpu().eval()
    members = [copied] if copied.ensemble is None else copied.ensemble.members(copied)  # an ensemble: every member's
    for member in members:
        if member.settings.finetune == "lora":
            member.backbone = member.backbone.merge_and_unload()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch points at torchao for new code; its dynamic quantization runs
            # Per output channel: torch's default for a bare {nn.Linear} is one scale per weight matrix (per tensor).
            member.backbone = quantize_dynamic(member.backbone, {nn.Linear: per_channel_dynamic_qconfig},
                                               dtype=torch.qint8)
    copied.requires_grad_(False)
    copied.__dict__["_exact"] = model
    copied.__dict__["_recheck_gap"] = int8_recheck_gap(model) if recheck_gap is None else recheck_gap
    return copied
