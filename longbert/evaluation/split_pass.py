"""Running a model over a tokenized split: batches for the model (`split_loader`, which training shares), the
probabilities and labels of every document, gathered in the split's order when several processes share the work,
and the inference speed and peak memory of the pass."""

from __future__ import annotations

import numpy as np
import torch
from accelerate.utils import gather_object
from torch.utils.data import DataLoader

from longbert.data.documents import collate, length_grouped_order
from longbert.data.lengths import longest_first_order
from longbert.evaluation.metrics import compute_metrics
from longbert.strategies.base import Units
from longbert.strategies.windows import gather_units
from longbert.utils.hardware import autocast_for, measure
from longbert.utils.progress import progress


def split_loader(dataset, batch_size: int, cached: list[dict] | None = None, shuffle_seed: int | None = None,
                 group_by_length: bool = False, order: list[int] | None = None):
    """A tokenized split in batches for the model: {'documents': B (T,) token-id tensors, 'labels'}, or, given the
    split's cached unit vectors (frozen mode, from `frozen.cache_units`), {'unit_vectors': (B, N, H), 'unit_mask':
    (B, N), 'labels'}. With `shuffle_seed`, shuffled in an order that depends on that seed only; with
    `group_by_length` too, in batches of similar length (`data.length_grouped_order`); with `order` (indices into
    the split), in that order."""
    rows = dataset.select_columns(["input_ids", "labels"]) if cached is None else cached
    collate_fn = collate if cached is None else collate_units
    if shuffle_seed is not None and group_by_length:
        order = length_grouped_order(list(dataset["n_tokens"]), batch_size, shuffle_seed)
        # A generator of its own even though the order is fixed: without one, each new iterator draws its base
        # seed from the global RNG, which would shift dropout between a resumed run and an uninterrupted one.
        return DataLoader(rows, batch_size=batch_size, sampler=order, collate_fn=collate_fn,
                          generator=torch.Generator().manual_seed(shuffle_seed))
    if order is not None:
        return DataLoader(rows, batch_size=batch_size, sampler=order, collate_fn=collate_fn)
    generator = None if shuffle_seed is None else torch.Generator().manual_seed(shuffle_seed)
    return DataLoader(rows, batch_size=batch_size, shuffle=generator is not None, generator=generator,
                      collate_fn=collate_fn)


def collate_units(rows: list[dict]) -> dict:
    """Cached documents -> {'unit_vectors': (B, N, H) padded, 'unit_mask': (B, N), 'labels': (B,) or (B, C)}, and
    'unit_sizes' (B, N) when the rows have them."""
    vectors = [r["unit_vectors"] for r in rows]
    sizes = torch.cat([r["unit_sizes"] for r in rows]).tolist() if "unit_sizes" in rows[0] else None
    units = gather_units(torch.cat(vectors), [v.shape[0] for v in vectors], sizes)  # (B, N, H)
    out = {"unit_vectors": units.vectors, "unit_mask": units.mask, "labels": torch.stack([r["labels"] for r in rows])}
    if units.sizes is not None:
        out["unit_sizes"] = units.sizes
    return out


def model_inputs(batch: dict, device: torch.device | None = None) -> dict:
    """The keyword arguments of LongDocumentClassifier.forward for a batch from `split_loader`; cached unit vectors
    moved to `device` (a loader that accelerate prepared has moved them already; token ids go to the device in the
    strategies' passes)."""
    if "unit_vectors" in batch:
        to = lambda t: t if t is None or device is None else t.to(device)
        return {"units": Units(to(batch["unit_vectors"]), to(batch["unit_mask"]), to(batch.get("unit_sizes")))}
    return {"documents": batch["documents"]}


@torch.no_grad()
def predict_dataset(model, dataset, batch_size: int, accelerator=None, description: str = "evaluating",
                    cached: list[dict] | None = None, precision: str = "auto", memory: bool = True) -> dict:
    """Run `model` over a tokenized split (or its cached unit vectors, see `split_loader`) at `precision` (see
    `longbert.utils.hardware.INFERENCE_PRECISIONS`; training's evaluations pass an accelerator and run under its
    autocast instead). Returns probabilities (D, C) (what the model answers; a calibrated model's `uncalibrated` (D, C)
    too), labels, per-document unit weights, and the inference speed and peak memory of the pass (on the CPU, None
    with `memory=False`: see `measure`)."""
    if precision != "auto":
        model = _unwrapped(model).for_precision(precision)
    # Longest documents first, as `predict` batches them: a batch pads little, and its windows fill large passes (in
    # the split's order a batch mixes lengths, and the pass budget splits it into many small passes, which leaves a
    # GPU idle). The results are put back in the split's order.
    order = longest_first_order(list(dataset["n_tokens"]))
    loader = split_loader(dataset, batch_size, cached, order=order)
    if accelerator is not None:
        loader = accelerator.prepare(loader)
    was_training = model.training
    model.eval()
    probabilities, uncalibrated, labels, weights = [], [], [], []
    device = next(model.parameters()).device
    autocast = accelerator.autocast() if accelerator is not None else autocast_for(model, precision)
    calibrated = _unwrapped(model).settings.temperatures is not None
    with measure(device, memory) as cost, autocast:
        for batch in progress(loader, description):
            out = model(**model_inputs(batch, device))
            p = out.unit_weights
            # What the model answers, and for a calibrated model what its logits give before calibration.
            probs = torch.stack([_unwrapped(model).probabilities(out.logits, calibrated=c)
                                 for c in ((True, False) if calibrated else (True,))])  # (1 or 2, B, C)
            batch_labels = batch["labels"]
            if accelerator is not None:
                probs, batch_labels = accelerator.gather_for_metrics((probs.transpose(0, 1), batch_labels))
                probs = probs.transpose(0, 1)
            probabilities.append(probs[0].float().cpu())
            if calibrated:
                uncalibrated.append(probs[1].float().cpu())
            labels.append(batch_labels.cpu())
            if accelerator is None or accelerator.num_processes == 1:
                p, present = (None, None) if p is None else (p.float().cpu(), out.unit_mask.cpu())  # one copy a batch
                for b in range(len(batch["labels"])):
                    weights.append(None if p is None else p[b][present[b]].tolist())
    model.train(was_training)
    inverse = np.argsort(order)  # position in reading order of each document of the split
    return {
        "probabilities": torch.cat(probabilities).numpy()[inverse],
        **({"uncalibrated": torch.cat(uncalibrated).numpy()[inverse]} if calibrated else {}),
        "labels": torch.cat(labels).numpy()[inverse],
        "unit_weights": [weights[i] for i in inverse] if weights else weights,
        "speed": {
            **_throughput(dataset, cost["seconds"]),
            "peak_memory_mb": cost["peak_memory_mb"],
            "added_memory_mb": cost["added_memory_mb"],
            "memory_kind": cost["memory_kind"],
        },
    }


def _unwrapped(model):
    """The classifier itself, whether or not a wrapper (DistributedDataParallel) holds it as `module`."""
    return getattr(model, "module", model)


def _throughput(dataset, seconds: float | None) -> dict:
    tokens = int(np.sum(list(dataset["n_tokens"])))
    return {
        "documents_per_second": len(dataset) / seconds if seconds else None,
        "tokens_per_second": tokens / seconds if seconds else None,
        "seconds": seconds,
    }


def predict_across_processes(model, dataset, batch_size: int, process, description: str = "evaluating",
                             precision: str = "auto", memory: bool = True) -> dict:
    """`predict_dataset` with the split divided between the processes of `process` (accelerate's PartialState):
    each predicts a contiguous share, and every process gets the whole result back in the split's order. The speed
    is that of the slowest process over all documents; the peak memory, the highest of any process."""
    with process.split_between_processes(list(range(len(dataset)))) as share:
        mine = list(share)
    part = (predict_dataset(model, dataset.select(mine), batch_size, description=description, precision=precision,
                            memory=memory) if mine else None)
    parts = [p for p in gather_object([part]) if p is not None]  # in process order: the split's order
    peaks = [p["speed"]["peak_memory_mb"] for p in parts if p["speed"]["peak_memory_mb"] is not None]
    return {
        "probabilities": np.concatenate([p["probabilities"] for p in parts]),
        **({"uncalibrated": np.concatenate([p["uncalibrated"] for p in parts])} if "uncalibrated" in parts[0] else {}),
        "labels": np.concatenate([p["labels"] for p in parts]),
        "unit_weights": [w for p in parts for w in p["unit_weights"]],
        "speed": {
            **_throughput(dataset, max(p["speed"]["seconds"] for p in parts)),
            "peak_memory_mb": max(peaks) if peaks else None,
            "added_memory_mb": max((p["speed"]["added_memory_mb"] for p in parts
                                    if p["speed"].get("added_memory_mb") is not None), default=None),
            "memory_kind": parts[0]["speed"]["memory_kind"],
            "processes": process.num_processes,
        },
    }


def evaluate_split(model, dataset, batch_size: int, accelerator=None, description: str = "evaluating",
                   cached: list[dict] | None = None, process=None, precision: str = "auto",
                   memory: bool = True) -> tuple[dict, dict]:
    """(metrics with a `speed` section, raw predictions) for one tokenized split (or its cached unit vectors).
    Multi-label predictions use the model's thresholds. Given `process` (accelerate's PartialState) of several
    processes and no `accelerator`, the split is divided between them (see `predict_across_processes`).
    `memory=False`: a pass whose memory nobody reads (training's validations) is only timed on the CPU."""
    if accelerator is None and cached is None and process is not None and process.num_processes > 1:
        raw = predict_across_processes(model, dataset, batch_size, process, description, precision, memory)
    else:
        raw = predict_dataset(model, dataset, batch_size, accelerator, description, cached, precision, memory)
    core = _unwrapped(model)
    metrics = compute_metrics(raw["labels"], raw["probabilities"], list(dataset["n_tokens"]), core.label_names,
                              core.multi_label, core.thresholds if core.multi_label else None,
                              uncalibrated=raw.get("uncalibrated"))
    metrics["speed"] = raw["speed"]
    return metrics, raw
