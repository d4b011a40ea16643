"""Frozen backbone (feature extraction): run the backbone once over train and validation, cache each document's
unit vectors (chunk/window embeddings), and train only the strategy's pooler and the head on the cache.
This is the classic "BERT embeddings + a light classifier" recipe; the head trains in seconds.

Training runs the same loop as fine-tuning (longbert.training.finetune); only a batch differs: cached unit vectors
instead of token ids (see `longbert.evaluation.split_pass.split_loader`)."""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader

from longbert.data.documents import collate
from longbert.errors import LongbertError
from longbert.strategies.base import Units
from longbert.training.stopping import stopped_before_checkpoint
from longbert.utils.hardware import autocast_for
from longbert.utils.logs import main_process_logger
from longbert.utils.progress import progress

log = main_process_logger(__name__)  # on the main process only


@torch.no_grad()
def cache_units(model, dataset, batch_size: int, description: str, stop=None) -> list[dict]:
    """Each document of a tokenized split, run once through the frozen backbone: a list of
    {'unit_vectors': (N_i, H) float32 on the CPU, 'labels': the document's label}, and 'unit_sizes' (N_i,) where the
    strategy weighs its units (`Units.sizes`). `stop`: a stop request, checked after every batch; once set,
    TrainingInterrupted is raised (nothing of the cache is kept: the run, started again, caches again)."""
    was_training = model.training
    model.eval()
    cached = []
    loader = DataLoader(dataset.select_columns(["input_ids", "labels"]), batch_size=batch_size, collate_fn=collate)
    device = next(model.parameters()).device
    with autocast_for(model):
        for batch in progress(loader, description):
            if stop is not None and stop.is_set():
                raise stopped_before_checkpoint(description)
            units = model.encode([d.to(device) for d in batch["documents"]])  # (B, N, H)
            for b, label in enumerate(batch["labels"]):
                row = {"unit_vectors": units.vectors[b][units.mask[b]].float().cpu(), "labels": label}
                if units.sizes is not None:
                    row["unit_sizes"] = units.sizes[b][units.mask[b]].float().cpu()
                cached.append(row)
    model.train(was_training)
    return cached


def refuse_untrainable(model) -> None:
    """Frozen mode trains on cached unit vectors, so only the parameters that `pool` and the head use can learn. A
    strategy parameter used while the backbone reads the document (an initial memory, an attention bias) would be
    saved untrained: raise a LongbertError naming it, before anything is cached or trained."""
    hidden = model.backbone.config.hidden_size
    device = next(model.parameters()).device
    sample = torch.randn(2, 3, hidden, generator=torch.Generator().manual_seed(0)).to(device)  # (B, N, H)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    was_training = model.training
    model.eval()  # no dropout: the check draws nothing from the random state that training uses
    logits = model(units=Units(sample, torch.ones(2, 3, dtype=torch.bool, device=device))).logits  # (B, C)
    grads = torch.autograd.grad(logits.sum(), [p for _, p in trainable], allow_unused=True)
    model.train(was_training)
    unused = [n for (n, _), g in zip(trainable, grads) if g is None]
    if unused:
        raise LongbertError(
            f"model.finetune=frozen cannot train {', '.join(unused)}: the strategy uses it while the backbone reads "
            "the document, which frozen mode does once, before training; use model.finetune=lora or full, or turn "
            "that part of the strategy off"
        )


def cache_splits(recipe, model, corpus, accelerator, untrained_allowed: bool, stop=None) -> tuple:
    """Frozen mode: the backbone reads train and validation once; the loop trains on what it wrote. Returns the
    unit vectors per split (None when the backbone trains) and the seconds that took. `stop`: see cache_units."""
    if not model.frozen:
        return None, 0.0
    if not untrained_allowed:  # a head stage leaves such weights (recurrence's biases) to the stage after it
        refuse_untrainable(model)
    model.to(accelerator.device)
    started = time.perf_counter()
    cached = {split: cache_units(model, corpus.splits[split], recipe.eval.batch_size, f"caching {split} embeddings",
                              stop)
              for split in ("train", "validation")}
    cache_seconds = time.perf_counter() - started
    log.info(f"cached {sum(map(len, cached.values()))} documents' embeddings in {cache_seconds:.1f}s")
    return cached, cache_seconds
