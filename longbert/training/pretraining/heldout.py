"""Pretraining's held-out measurement: the MLM loss and perplexity over held-out documents masked once, overall and by
document position (within the positions the backbone had learned, and past them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from longbert.training.pretraining.masking import HELDOUT_MASKS, Masker, seeded
from longbert.utils.progress import progress

BUCKETS = ("within_learned", "beyond_learned")  # document positions the backbone had learned (0-511), and after them


@dataclass
class HeldOut:
    """The held-out documents, masked once (seeded per document)."""

    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]

    @classmethod
    def mask(cls, documents: list[np.ndarray], masker: Masker, seed: int) -> "HeldOut":
        pairs = [masker(torch.from_numpy(d).long(), seeded(seed, HELDOUT_MASKS, i)) for i, d in enumerate(documents)]
        return cls([p[0] for p in pairs], [p[1] for p in pairs])


@torch.no_grad()
def heldout_loss(model, heldout: HeldOut, batch_size: int, learned_positions: int, description: str) -> dict:
    """The mean MLM loss and perplexity over every held-out target the strategy reads, overall and by document
    position: within_learned (below `learned_positions`, [CLS] at 0) and beyond_learned; with the number of targets
    each."""
    was_training = model.training
    model.eval()
    sums = {"all": [0.0, 0], "within_learned": [0.0, 0], "beyond_learned": [0.0, 0]}
    order = sorted(range(len(heldout.inputs)), key=lambda i: -len(heldout.inputs[i]))  # batches of similar lengths
    try:
        for start in progress(range(0, len(order), batch_size), description):
            rows = order[start : start + batch_size]
            losses, positions = model([heldout.inputs[i] for i in rows], [heldout.targets[i] for i in rows])
            losses, far = losses.double().cpu(), positions.cpu() >= learned_positions
            for key, chosen in (("all", slice(None)), ("within_learned", ~far), ("beyond_learned", far)):
                sums[key][0] += float(losses[chosen].sum())
                sums[key][1] += int(losses[chosen].numel())
    finally:
        model.train(was_training)
    out = {}
    for key, (total, count) in sums.items():
        loss = total / count if count else None
        out[key] = {"loss": loss, "perplexity": None if loss is None else math.exp(min(loss, 700.0)), "targets": count}
    return out


def bucket_labels(learned_positions: int) -> dict[str, str]:
    return {"within_learned": f"positions 0-{learned_positions - 1}",
            "beyond_learned": f"positions {learned_positions}+"}


def describe(result: dict, learned_positions: int) -> str:
    """'2.345 (perplexity 10.4); positions 0-511: ...; positions 512+: ...' for one held-out measurement."""
    def one(entry):
        return "none" if entry["loss"] is None else f"{entry['loss']:.3f} (perplexity {entry['perplexity']:.1f})"

    labels = bucket_labels(learned_positions)
    return f"{one(result['all'])}; {'; '.join(f'{labels[key]}: {one(result[key])}' for key in BUCKETS)}"
