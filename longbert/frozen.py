"""Frozen backbone (feature extraction): run the backbone once over train and validation, cache each document's
unit vectors (chunk/window embeddings), and train only the strategy's pooler and the head on the cache.
This is the classic "BERT embeddings + a light classifier" recipe; the head trains in seconds."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from longbert.data import collate
from longbert.evaluation import compute_metrics, improves
from longbert.hardware import autocast_for, measure
from longbert.progress import progress
from longbert.strategies.base import Units
from longbert.strategies.windows import gather_units


@torch.no_grad()
def cache_units(model, dataset, batch_size: int, description: str) -> list[torch.Tensor]:
    """Each document's unit vectors, (N_i, H) float32 on the CPU, computed once with the frozen backbone."""
    model.eval()
    cached = []
    rows = dataset.select_columns(["input_ids", "labels"])
    device = next(model.parameters()).device
    batches = range(0, len(rows), batch_size)
    with autocast_for(model):
        for start in progress(batches, description):
            documents = [d.to(device) for d in collate(rows.select(range(start, min(start + batch_size, len(rows)))))["documents"]]
            units = model.encode(documents)  # (B, N, H)
            cached.extend(units.vectors[b][units.mask[b]].float().cpu() for b in range(len(documents)))
    return cached


def stack_units(items: list[torch.Tensor], device) -> Units:
    """A list of (N_i, H) -> padded Units (B, N, H) with mask (B, N)."""
    return gather_units(torch.cat(items).to(device), [x.shape[0] for x in items])


def train_frozen_head(recipe, model, corpus, accelerator, best_dir: Path):
    from longbert.training import LoopState

    cfg = recipe.train
    device = accelerator.device
    model.to(device)
    with measure(device) as cost:
        train_units = cache_units(model, corpus.splits["train"], recipe.eval.batch_size, "caching train embeddings")
        val_units = cache_units(model, corpus.splits["validation"], recipe.eval.batch_size, "caching validation embeddings")
    accelerator.print(f"cached {len(train_units) + len(val_units)} documents' embeddings in {cost['seconds']:.1f}s")
    train_labels = torch.tensor(list(corpus.splits["train"]["labels"]))
    val = corpus.splits["validation"]
    head_params = [p for n, p in model.named_parameters() if not n.startswith("backbone.") and p.requires_grad]
    optimizer = torch.optim.AdamW(head_params, lr=cfg.head_learning_rate, weight_decay=cfg.weight_decay)
    state = LoopState(history=[])
    best_head = None
    started = time.perf_counter()
    generator = torch.Generator().manual_seed(recipe.seed)
    for epoch in progress(range(cfg.frozen_head_epochs), "training head on cached embeddings"):
        state.epoch = epoch
        model.train()
        for batch in torch.randperm(len(train_units), generator=generator).split(cfg.batch_size):
            units = stack_units([train_units[i] for i in batch], device)
            loss = model.loss(model(units=units).logits, train_labels[batch].to(device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            state.global_step += 1
        # Evaluate on the cached validation embeddings; keep the best head.
        model.eval()
        with torch.no_grad():
            probabilities = torch.cat([
                model.probabilities(model(units=stack_units(val_units[s : s + 256], device)).logits).cpu()
                for s in range(0, len(val_units), 256)
            ]).numpy()
        import numpy as np

        metrics = compute_metrics(np.array(list(val["labels"])), probabilities, list(val["n_tokens"]), model.label_names, model.multi_label)
        value = metrics[cfg.best_metric]
        state.history.append({"step": state.global_step, "epoch": epoch + 1, "accuracy": metrics["accuracy"],
                              "macro_f1": metrics["macro_f1"], "loss": metrics["loss"]})
        if improves(value, state.best_metric, cfg.best_metric):
            state.best_metric, state.best_step = value, state.global_step
            best_head = model.head_state()
    state.train_seconds = cost["seconds"] + time.perf_counter() - started
    model.load_head_state(best_head)
    if accelerator.is_main_process:
        model.save_pretrained(best_dir)
    accelerator.print(f"frozen head: best validation {cfg.best_metric} {state.best_metric:.4f} at step {state.best_step}")
    return state
