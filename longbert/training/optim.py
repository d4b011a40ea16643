"""The optimiser's side of both loops: which parameters weight decay reaches, AdamW's parameter groups, a warmup
schedule, and one optimiser step (clip, step, schedule, zero the gradients) taken when accumulated gradients sync."""

from __future__ import annotations

import re
from typing import Callable

import torch

from longbert.utils.allocator import trim_heap


def decays(name: str, parameter: torch.Tensor) -> bool:
    """Whether AdamW's weight decay applies to parameter `name`: to matrices (linear maps, embeddings, memory
    tokens) only. Decay pulls a weight towards 0, which regularises a linear map; for an offset or a scale it only
    moves the model away from what it learnt (1,000 steps of it move recurrence's distance bias from -3 to -2.97 with
    no gradient at all). So no decay for biases (`bias`, and tables named `*_bias`, such as recurrence's 3-D distance
    and memory biases), for the weights of norms (any module named `*norm*`: LayerNorm, RMSNorm) and for anything of
    fewer than 2 dimensions (scalars, gates, per-channel scales)."""
    parts = name.lower().split(".")
    return parameter.ndim >= 2 and not parts[-1].endswith("bias") and not any("norm" in part for part in parts[:-1])


def classifier_backbone(name: str) -> bool:
    """Whether parameter `name` of a LongDocumentClassifier is its backbone's."""
    return name.startswith("backbone.")


LAYER_INDEX = re.compile(r"\.layers?\.(\d+)\.")  # a transformer layer's parameters: encoder.layer.3.attention...


def layer_depth(name: str, layers: int) -> int:
    """How high a backbone parameter sits: 0 for the embeddings, k + 1 for transformer layer k, and anything above
    the layers (a pooler) as high as the top layer, `layers`."""
    if "embeddings" in name.split("."):
        return 0
    found = LAYER_INDEX.search(name)
    return int(found.group(1)) + 1 if found else layers


def param_groups(model: torch.nn.Module, cfg, is_backbone: Callable[[str], bool] = classifier_backbone) -> list[dict]:
    """AdamW groups of `model`'s trainable parameters, in this order: backbone decayed, backbone not decayed, head
    (everything else: the strategy, the head) decayed, head not decayed; empty groups left out. The backbone's
    learning rate is cfg.learning_rate, the rest's cfg.head_learning_rate; `decays` says which get cfg.weight_decay.
    `is_backbone(name)` says which parameters are the backbone's (by default a LongDocumentClassifier's). Each group
    records whether it is the backbone's (`backbone`), for schedules that treat the two apart.
    With cfg.layer_decay below 1 (layer-wise learning-rate decay, as ELECTRA fine-tunes: Clark et al. 2020), the
    backbone's groups are split by layer: the top layer (and a pooler above it) learns at cfg.learning_rate, each layer
    below at layer_decay times the one above, the embeddings at layer_decay ** layers."""
    decay = getattr(cfg, "layer_decay", 1.0)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    indices = [int(m.group(1)) for n, _ in named if is_backbone(n) and (m := LAYER_INDEX.search(n))]
    layers = max(indices) + 1 if indices else 0
    groups: dict[tuple, list] = {}
    for name, parameter in named:
        backbone = is_backbone(name)
        depth = layer_depth(name, layers) if backbone and decay != 1.0 else 0
        groups.setdefault((not backbone, -depth, not decays(name, parameter)), []).append(parameter)
    out = []
    for head, minus_depth, no_decay in sorted(groups):  # backbone first, top layer first, decayed first
        lr = cfg.head_learning_rate if head else cfg.learning_rate * decay ** (layers + minus_depth)
        out.append({"params": groups[(head, minus_depth, no_decay)], "lr": lr, "backbone": not head,
                    "weight_decay": 0.0 if no_decay else cfg.weight_decay})
    return out


def warmup_then_decay(step: int, total: int, warmup_ratio: float) -> float:
    """The learning rate's factor at `step` of `total`: linear warmup over warmup_ratio * total steps, then linear
    decay to 0 (transformers' get_linear_schedule_with_warmup)."""
    warmup = int(warmup_ratio * total)
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def optimizer_step(accelerator, model: torch.nn.Module, optimizer, scheduler, max_grad_norm: float,
                   trim: bool = False) -> bool:
    """Call inside `accelerator.accumulate(model)`, after the backward pass. Once the accumulated gradients are
    complete (accelerate's `sync_gradients`): clip them to `max_grad_norm` (0: no clipping), step the optimiser and
    the schedule, zero the gradients, and with `trim` hand the freed heap back on the CPU (see `trim_heap`). Before
    that (the other batches of an accumulation) it does nothing. Returns whether it stepped."""
    if not accelerator.sync_gradients:
        return False
    if max_grad_norm > 0:
        accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    if trim and accelerator.device.type == "cpu":
        trim_heap()
    return True
