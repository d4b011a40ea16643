"""Training: one loop, read top to bottom, for every fine-tuning mode. accelerate does device placement, mixed
precision and distribution, so the same code runs on a CPU, one GPU, or many through `accelerate launch`.
Frozen mode runs the same loop; only a batch differs (each document's cached unit vectors instead of its token ids),
and only the strategy's pooler and the head train.

A run folder holds:
    recipe.yaml                the resolved recipe (what ran)
    checkpoint/                the last resumable state (see longbert.checkpoint); written whole or not at all
    best/                      the kept model (best validation metric), loadable by LongDocumentClassifier; written
                               when training ends
    metrics.json, metrics.md   validation history, test metrics, timing, data statistics
    predictions-test.jsonl     per-document test predictions (for error analysis)
One process writes a run folder at a time (longbert.runs locks it); what a killed run left there (a half-written
checkpoint, a swap cut between its two renames) is put right when the next run starts, with or without --resume.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

import torch

from longbert.checkpoint import (LoopState, load_checkpoint, load_trainable_weights, recipe_fingerprint,
                                 save_checkpoint, trainable_weights)
from longbert.config import Recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.evaluation import (evaluate_split, improves, metrics_markdown, model_inputs, split_loader, write_json,
                                 write_predictions)
from longbert.hardware import describe_machine, resolve_precision
from longbert.progress import progress
from longbert.runs import BEST, CHECKPOINT, RECIPE, locked, prepare


class TrainingInterrupted(LongbertError):
    """Raised after a clean stop (Ctrl-C, SIGTERM, or a stop request) once the checkpoint is on disk."""


@dataclass
class TrainResult:
    run_dir: Path
    metrics: dict  # what metrics.json holds


class StopRequest(Protocol):
    """What `train(stop=...)` accepts: a threading.Event, or anything with the same two methods."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...


def train(recipe: Recipe, resume: bool = False, command: str | None = None,
          stop: StopRequest | None = None, data=None) -> TrainResult:
    """Train `recipe` into its run folder (recipe.output_dir) and evaluate the kept model on the test split.
    With `resume`, continue the run from its last checkpoint (the recipe must be the same).
    `stop`: checked once after every optimiser step; once set, training writes a checkpoint and raises
    TrainingInterrupted. Ctrl-C and SIGTERM set it (in the main thread); a second Ctrl-C interrupts at once.
    `data`: documents in memory instead of data.path (a datasets.Dataset or DatasetDict, a pandas DataFrame, texts
    and labels; see longbert.data.data_object_splits); the recipe's other data settings apply, and the recipe saved
    in the run folder says what kind of object it was and its rows per split."""
    from accelerate import PartialState
    from accelerate.utils import broadcast_object_list

    from longbert.data import recipe_for_data_object

    if data is not None:
        recipe = recipe_for_data_object(recipe, data)
    run_dir = Path(recipe.output_dir)
    stop = threading.Event() if stop is None else stop
    if resume and not run_dir.is_dir():
        raise LongbertError(f"--resume: {run_dir} has no checkpoint to continue from (the folder does not exist)")
    process = PartialState()  # which process this is (`accelerate launch` starts one per device)
    # The main process holds the folder's lock and decides how the run starts; the others follow its decision.
    with locked(run_dir) if process.is_main_process else nullcontext(), stop_on_signals(stop):
        decision = [prepare(run_dir, recipe, resume) if process.is_main_process else None]
        if process.num_processes > 1:
            broadcast_object_list(decision)
        return _train(recipe, run_dir, decision[0], command, stop, data)


@contextmanager
def stop_on_signals(stop: StopRequest) -> Iterator[None]:
    """While the block runs, the first Ctrl-C / SIGTERM sets `stop` (the loop stops after the current optimiser step
    and writes a checkpoint); a second Ctrl-C interrupts at once."""

    def request(signum, frame):
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {}
    try:
        previous = {s: signal.signal(s, request) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no signal handling
        pass
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _train(recipe: Recipe, run_dir: Path, resume: bool, command: str | None, stop: StopRequest,
           data=None) -> TrainResult:
    from accelerate import Accelerator
    from accelerate.utils import set_seed

    from longbert import frozen
    from longbert.atomic import write_text_atomically
    from longbert.backbone import load_backbone
    from longbert.data import load_corpus
    from longbert.model import LongDocumentClassifier

    cfg = recipe.train
    precision = resolve_precision(cfg.mixed_precision, "cuda" if torch.cuda.is_available() else "cpu")
    # accelerate keeps its settings in a process-wide singleton; a second run in the same process (a notebook, or
    # `compare`) may ask for another precision, so clear the per-run part (never the process group).
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=False)
    GradientState._reset_state()
    accelerator = Accelerator(mixed_precision=precision, gradient_accumulation_steps=cfg.gradient_accumulation)
    set_seed(recipe.seed)

    # The backbone and its tokenizer, loaded once; the data (the head's size depends on the labels), tokenized
    # with that tokenizer; then the model around that backbone.
    backbone, tokenizer = load_backbone(recipe.backbone.name, recipe.backbone.attention_dropout,
                                        recipe.backbone.hidden_dropout)
    multi_label = recipe.model.problem_type == "multi_label"
    corpus = load_corpus(recipe.data, tokenizer, recipe.seed, multi_label, source=data)
    accelerator.print(corpus.summary())
    cut = {role: s["cut_by_token_cap"] for role, s in corpus.stats.items() if s["cut_by_token_cap"]}
    if cut:
        accelerator.print(f"data: documents cut at data.max_document_tokens={recipe.data.max_document_tokens}: "
                          + ", ".join(f"{n} in {role}" for role, n in cut.items()))
    model = LongDocumentClassifier.from_recipe(recipe, corpus.label_names, loaded=(backbone, tokenizer))

    # Frozen mode: the backbone reads train and validation once; the loop trains on what it wrote.
    cached, cache_seconds = None, 0.0
    if model.frozen:
        frozen.refuse_untrainable(model)
        model.to(accelerator.device)
        started = time.perf_counter()
        cached = {split: frozen.cache_units(model, corpus.splits[split], recipe.eval.batch_size,
                                            f"caching {split} embeddings") for split in ("train", "validation")}
        cache_seconds = time.perf_counter() - started
        accelerator.print(f"cached {sum(map(len, cached.values()))} documents' embeddings in {cache_seconds:.1f}s")

    if accelerator.is_main_process:
        write_text_atomically(run_dir / RECIPE, recipe_to_yaml(recipe))
    accelerator.wait_for_everyone()

    state, model, best = _fit(recipe, model, corpus, cached, accelerator, run_dir, resume, stop)

    # The kept model: its weights back into the model in memory, saved as best/, evaluated on the test split
    # (token ids, in every mode: the test measures the whole model). No autocast wrapper from training is left on.
    accelerator.wait_for_everyone()
    core = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    if best is not None:
        load_trainable_weights(core, best, "the kept weights")
    if accelerator.is_main_process:
        core.save_pretrained(run_dir / BEST)
    metrics = {
        "recipe": recipe.name,
        "strategy": recipe.strategy.name,
        "command": command,
        "machine": describe_machine(),
        "mixed_precision": precision,
        "data": corpus.stats,
        "label_names": corpus.label_names,
        "trainable_parameters": core.trainable_parameters(),
        "train_seconds": cache_seconds + state.train_seconds,
        "steps": state.global_step,
        "best_step": state.best_step,
        "best_validation": state.best_metric,
        "best_metric": cfg.best_metric,
        "validation_history": state.history,
    }
    if "test" in corpus.splits:
        test_metrics, raw = evaluate_split(core, corpus.splits["test"], recipe.eval.batch_size, description="test")
        metrics["test"] = test_metrics
        if accelerator.is_main_process:
            write_predictions(run_dir / "predictions-test.jsonl", corpus.splits["test"], raw,
                              corpus.label_names, multi_label)
    if accelerator.is_main_process:
        write_json(run_dir / "metrics.json", metrics)
        page = metrics_markdown(metrics["test"], corpus.label_names, f"{recipe.name}: test",
                                run_dir / "confusion-matrix.png") if "test" in metrics else ""
        write_text_atomically(run_dir / "metrics.md", page)
    return TrainResult(run_dir, metrics)


def _param_groups(model, cfg):
    """AdamW groups: backbone weights (decayed), backbone biases/LayerNorm (not decayed), strategy + head."""
    backbone_decay, backbone_plain, head = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if not name.startswith("backbone."):
            head.append(p)
        elif p.ndim < 2:
            backbone_plain.append(p)
        else:
            backbone_decay.append(p)
    groups = [
        {"params": backbone_decay, "lr": cfg.learning_rate, "weight_decay": cfg.weight_decay},
        {"params": backbone_plain, "lr": cfg.learning_rate, "weight_decay": 0.0},
        {"params": head, "lr": cfg.head_learning_rate, "weight_decay": cfg.weight_decay},
    ]
    return [g for g in groups if g["params"]]


def _fit(recipe, model, corpus, cached, accelerator, run_dir: Path, resume: bool, stop: StopRequest):
    """The loop. `cached`: frozen mode's unit vectors per split (None when the backbone trains). Returns the loop
    state, the prepared model and the kept weights (from `trainable_weights`)."""
    from transformers import get_linear_schedule_with_warmup

    cfg = recipe.train
    epochs = cfg.frozen_head_epochs if cached is not None else cfg.epochs
    cached = cached or {}
    batches_per_epoch = math.ceil(len(corpus.splits["train"]) / (cfg.batch_size * accelerator.num_processes))
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation)
    total_steps = epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)

    optimizer = torch.optim.AdamW(_param_groups(model, cfg))
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    core = accelerator.unwrap_model(model)
    fingerprint = recipe_fingerprint(recipe)

    state, best = LoopState(), None  # best: a CPU copy of the kept weights, taken when validation improves
    if resume:
        state, best = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        accelerator.print(f"resuming {run_dir} at step {state.global_step} (epoch {state.epoch + 1})")

    def evaluate_and_keep():
        nonlocal best
        metrics, _ = evaluate_split(model, corpus.splits["validation"], recipe.eval.batch_size, accelerator,
                                    description="validation", cached=cached.get("validation"))
        value = metrics[cfg.best_metric]
        better = improves(value, state.best_metric, cfg.best_metric)
        state.history.append({"step": state.global_step, "epoch": state.epoch + 1, "accuracy": metrics["accuracy"],
                              "macro_f1": metrics["macro_f1"], "loss": metrics["loss"]})
        if better:
            state.best_metric, state.best_step = value, state.global_step
            best = trainable_weights(core)
        accelerator.print(f"step {state.global_step}: validation {cfg.best_metric} {value:.4f}"
                          f"{' (best so far, kept)' if better else ''}")

    def checkpoint():
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            save_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, state, fingerprint, best)

    model.train()
    started = time.perf_counter() - state.train_seconds
    while state.epoch < epochs:
        # The epoch's order depends only on the seed and the epoch, so a resumed run sees the same batches.
        loader = accelerator.prepare(split_loader(corpus.splits["train"], cfg.batch_size, cached.get("train"),
                                                  shuffle_seed=recipe.seed + state.epoch))
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(loader, state.batches_in_epoch)
        for batch in progress(loader, f"epoch {state.epoch + 1}/{epochs}"):
            if state.global_step >= total_steps:  # max_steps reached (here too when resuming at that very step)
                break
            # Forward and backward; accelerate sums gradients over `gradient_accumulation` batches.
            with accelerator.accumulate(model):
                logits = model(**model_inputs(batch)).logits  # (B, C)
                loss = core.loss(logits, batch["labels"])
                accelerator.backward(loss)
                # Clip, step, schedule: these act only when the accumulated gradients are complete.
                if accelerator.sync_gradients and cfg.max_grad_norm > 0:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            state.batches_in_epoch += 1
            if not accelerator.sync_gradients:
                continue
            state.global_step += 1
            state.train_seconds = time.perf_counter() - started
            # Evaluate every N steps when asked; checkpoint every M steps; stop cleanly on request.
            if cfg.eval_every_steps and state.global_step % cfg.eval_every_steps == 0:
                evaluate_and_keep()
                model.train()
            if state.global_step % cfg.checkpoint_every_steps == 0:
                checkpoint()
            if stop.is_set():
                checkpoint()
                raise TrainingInterrupted(
                    f"training stopped at step {state.global_step}; the checkpoint is in {run_dir / CHECKPOINT}; "
                    "continue with --resume"
                )
        # End of epoch (or of max_steps): evaluate (unless evaluating every N steps already did at this step) and
        # checkpoint.
        state.train_seconds = time.perf_counter() - started
        if not cfg.eval_every_steps or state.global_step % cfg.eval_every_steps:
            evaluate_and_keep()
            model.train()
        state.epoch += 1
        state.batches_in_epoch = 0
        checkpoint()
        if state.global_step >= total_steps:
            break
    return state, model, best
