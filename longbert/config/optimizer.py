"""The optimiser settings fine-tuning and pretraining share: AdamW with one learning rate for the backbone and one for
the head, linear warmup then decay, gradient clipping, mixed precision.

Each loop keeps its own `train` section, with its own defaults and its own way of counting (epochs or steps) and
its own field order (the order `unknown recipe key` lists); what is the same in both is declared and checked once
here.
"""

from __future__ import annotations

from typing import Any

from longbert.utils.fields import one_of, option

PRECISIONS = ("auto", "no", "bf16", "fp16")


def weight_decay_option() -> Any:
    """The `train.weight_decay` field of both recipes."""
    return option(0.01, "AdamW weight decay (not applied to biases and LayerNorm)")


def max_grad_norm_option() -> Any:
    """The `train.max_grad_norm` field of both recipes."""
    return option(1.0, "gradient clipping norm; 0 turns clipping off")


def mixed_precision_option() -> Any:
    """The `train.mixed_precision` field of both recipes."""
    return option("auto", "no, bf16, fp16, or auto (bf16 where the hardware runs it fast, else no)")


def optimiser_problems(train: Any, path: str) -> list[str]:
    """The problems of a `train` section's optimiser settings (learning_rate, head_learning_rate, warmup_ratio,
    max_grad_norm, mixed_precision), each named by its YAML path under `path`."""
    out = []
    if train.learning_rate <= 0 or train.head_learning_rate <= 0:
        out.append(f"{path}.learning_rate and head_learning_rate must be > 0")
    if not 0 <= train.warmup_ratio < 1:
        out.append(f"{path}.warmup_ratio must be in [0, 1), got {train.warmup_ratio}")
    if train.max_grad_norm < 0:
        out.append(f"{path}.max_grad_norm must be >= 0, got {train.max_grad_norm}")
    out += one_of(f"{path}.mixed_precision", train.mixed_precision, PRECISIONS)
    return out
