"""The fine-tuning loop, read top to bottom, for every stage that trains a model (longbert.training.trainer runs
them). accelerate does device placement, mixed precision and distribution, so the same code runs on a CPU, one GPU, or
many through `accelerate launch`. Frozen mode (and the head stage) runs the same loop; only a batch differs (each
document's cached unit vectors instead of its token ids), and only the strategy's pooler and the head train.

    model, started_from, class_weights = build_stage_model(recipe, corpus, (backbone, tokenizer), source)
    state, model, best, reader = fit(recipe, model, corpus, cached, accelerator, run_dir, resume, stop, ...)

`fit` validates, keeps the best weights, stops early, and writes the run's checkpoint (run_dir/checkpoint); the
scaffolding it shares with pretraining's loop lives in the training package's other modules.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import get_linear_schedule_with_warmup

from longbert.config import Recipe, head_epochs, is_multi_label
from longbert.evaluation.metrics import HISTORY_METRICS, improves
from longbert.evaluation.split_pass import evaluate_split, model_inputs, split_loader
from longbert.training.checkpoint import (
    LoopState,
    load_checkpoint,
    read_reading,
    save_checkpoint,
    trainable_weights,
)
from longbert.training.class_weights import class_weights_for
from longbert.training.init_from import build_model
from longbert.training.optim import optimizer_step, param_groups
from longbert.training.selective import UnitReader, unit_reader
from longbert.training.stopping import StopRequest, finite_loss, interrupted
from longbert.training.train_log import close_log_window, speed
from longbert.utils.folders import CHECKPOINT
from longbert.utils.hardware import adamw
from longbert.utils.logs import main_process_logger
from longbert.utils.progress import progress

log = main_process_logger(__name__)  # on the main process only


def build_stage_model(recipe: Recipe, corpus, loaded: tuple, source) -> tuple:
    """The model around the loaded backbone, for the corpus's classes. Returns the model, what train.init_from
    loaded (None without it) and the loss's class weights (None without model.class_weights)."""
    multi_label = is_multi_label(recipe.model.problem_type)
    # With train.init_from, the earlier model's weights replace the new ones where they fit (training/init_from.py);
    # a resumed run loads its checkpoint over them in fit.
    model, started_from = build_model(recipe, corpus.label_names, loaded, source)
    for note in model.notes:
        log.info(note)
    class_weights = class_weights_for(recipe.model.class_weights, corpus.splits["train"]["labels"],
                                      corpus.label_names, multi_label)
    if class_weights is not None:
        log.info("class weights: " + ", ".join(f"{n} {w:.3f}" for n, w in zip(corpus.label_names,
                                                                               class_weights.tolist())))
    threshold = recipe.model.multi_label_threshold
    if multi_label and not isinstance(threshold, str):
        model.settings.thresholds = [float(threshold)] * len(corpus.label_names)
    return model, started_from, class_weights


def fit(recipe, model, corpus, cached, accelerator, run_dir: Path, resume: bool, stop: StopRequest, class_weights=None,
        started_trained: bool = False, *, fingerprint: str, fresh: LoopState, start: dict | None = None):
    """The loop. `cached`: frozen mode's unit vectors (None: the backbone trains). `started_trained`: the start is
    validated at step 0 and kept unless training beats it. Checkpoints carry `fingerprint` (the run recipe's) and
    `start`; a loop that does not resume starts at `fresh`. Returns (state, prepared model, kept weights, reader)."""
    cfg = recipe.train
    epochs = head_epochs(cfg, head_stage=False) if cached is not None else cfg.epochs
    total_steps = _total_steps(cfg, epochs, len(corpus.splits["train"]), accelerator.num_processes)
    reader = None if cached is not None else unit_reader(recipe, model, corpus, accelerator)  # before the optimiser
    loop = _start_loop(recipe, model, corpus, cached or {}, accelerator, run_dir, resume, total_steps, reader,
                       fingerprint, fresh, start)
    state, model, core = loop.state, loop.model, loop.core
    if started_trained and not state.history:  # the start is a candidate: fine-tuning must beat it to replace it
        loop.evaluate_and_keep()
    model.train()
    loop.started = time.perf_counter() - state.train_seconds
    while state.epoch < epochs and state.stopped_early_at_step is None:
        if reader is not None:
            reader.start_epoch(state.epoch)
        for batch in progress(loop.epoch_loader(), f"epoch {state.epoch + 1}/{epochs}"):
            if state.global_step >= total_steps:  # max_steps reached (here too when resuming at that very step)
                break
            with accelerator.accumulate(model):  # accumulate: the gradients of `gradient_accumulation` batches sum
                loss = _batch_loss(model, core, batch, class_weights, cfg.unit_loss_weight, reader)  # forward
                accelerator.backward(loss)  # backward
                optimizer_step(accelerator, model, loop.optimizer, loop.scheduler, cfg.max_grad_norm,
                               trim=cfg.trim_heap)  # clip, step, schedule: once the accumulated batches are complete
            loop.count_batch(batch, loss)  # where a resumed run goes on from; the training log's loss and tokens
            if not accelerator.sync_gradients:
                continue
            state.global_step += 1
            state.train_seconds = time.perf_counter() - loop.started
            if state.global_step % cfg.log_every_steps == 0:  # log every L steps
                loop.log_training()
            if cfg.eval_every_steps and state.global_step % cfg.eval_every_steps == 0:  # evaluate every N, if asked
                loop.evaluate_and_keep()
                model.train()
            if state.stopped_early_at_step is not None:  # stop early (the epoch's end checkpoints)
                break
            if state.global_step % cfg.checkpoint_every_steps == 0:  # checkpoint every M steps
                loop.checkpoint()
            if stop.is_set():  # stop cleanly on request
                loop.checkpoint()
                raise interrupted("training", state.global_step, run_dir / CHECKPOINT)
        # End of epoch (or of max_steps, or early stopping): evaluate (unless evaluating every N steps already did at
        # this step), log the batches since the last log line when training ends here, and checkpoint.
        state.train_seconds = time.perf_counter() - loop.started
        if not cfg.eval_every_steps or state.global_step % cfg.eval_every_steps:
            loop.evaluate_and_keep()
            model.train()
        ending = (state.epoch + 1 == epochs or state.global_step >= total_steps
                  or state.stopped_early_at_step is not None)
        if ending and state.loss_batches:
            loop.log_training()
        state.epoch += 1
        state.batches_in_epoch = 0
        loop.checkpoint()
        if state.global_step >= total_steps:
            break
    return state, model, loop.best, reader


def _total_steps(cfg, epochs: int, train_documents: int, processes: int) -> int:
    """Optimiser steps in `epochs` epochs of `train_documents` shared by `processes`, at most train.max_steps."""
    batches_per_epoch = math.ceil(train_documents / (cfg.batch_size * processes))
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation)
    total_steps = epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    return total_steps


def _start_loop(recipe: Recipe, model, corpus, cached: dict, accelerator, run_dir: Path, resume: bool,
                total_steps: int, reader: UnitReader | None, fingerprint: str, fresh: LoopState,
                start: dict | None) -> _Loop:
    """The optimiser and the schedule, prepared with the model; with `resume`, the checkpoint loaded over them (else
    the loop starts at `fresh`)."""
    cfg = recipe.train
    optimizer = adamw(param_groups(model, cfg))  # the backbone's parameters apart from the strategy's and the head's
    # A prepared scheduler takes one step per process at every optimiser step (accelerate counts the batches of all
    # processes), so the schedule is laid out in those units: the same learning rate at every optimiser step as one
    # process with the same effective batch. So a checkpoint resumes only with as many processes (runs.check_processes).
    per_step = accelerator.num_processes
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps) * per_step,
                                                total_steps * per_step)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    core = accelerator.unwrap_model(model)
    state, best = fresh, None
    if resume:
        state, best = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        log.info(f"resuming {run_dir} at step {state.global_step} (epoch {state.epoch + 1})")
        if reader is not None and (saved := read_reading(run_dir / CHECKPOINT)) is not None:
            reader.load_state(saved)
    return _Loop(recipe, corpus, cached, accelerator, run_dir, model, core, optimizer, scheduler, fingerprint, state,
                 best, reader, start)


def _batch_loss(model, core, batch: dict, class_weights: torch.Tensor | None, unit_loss_weight: float,
                reader: UnitReader | None = None):
    """Forward: the batch's loss (a scalar tensor). `reader`: how the documents are read (train.reading)."""
    output = model(**model_inputs(batch), **({} if reader is None else {"reader": reader}))
    loss = core.loss(output.logits, batch["labels"], class_weights)  # logits (B, C)
    if unit_loss_weight:  # each unit also learns its document's label (core.unit_loss)
        loss = loss + unit_loss_weight * core.unit_loss(output.units, batch["labels"], class_weights)
    return loss


@dataclass
class _Loop:
    """What the steps of fit's loop share: the prepared model, optimiser and scheduler, the loop state, and the kept
    weights (`best`: a CPU copy of them, taken when validation improves)."""

    recipe: Recipe
    corpus: object
    cached: dict  # frozen mode's unit vectors per split; empty when the backbone trains
    accelerator: object
    run_dir: Path
    model: torch.nn.Module  # prepared
    core: torch.nn.Module  # the model unwrapped
    optimizer: torch.optim.Optimizer
    scheduler: object
    fingerprint: str
    state: LoopState
    best: dict | None
    reader: UnitReader | None = None  # how the end-to-end stage reads documents (train.reading)
    start: dict | None = None  # the weights an earlier stage trained that this one started from (checkpointed)
    started: float = 0.0  # the loop's start (time.perf_counter), less the training time before a resume

    def epoch_loader(self):
        """The batches of this epoch not yet trained on. The epoch's order depends only on the seed and the epoch,
        so a resumed run sees the same batches."""
        state, cfg = self.state, self.recipe.train
        batches = split_loader(self.corpus.splits["train"], cfg.batch_size, self.cached.get("train"),
                               shuffle_seed=self.recipe.seed + state.epoch, group_by_length=cfg.group_by_length)
        loader = self.accelerator.prepare(batches)
        if state.batches_in_epoch:
            loader = self.accelerator.skip_first_batches(loader, state.batches_in_epoch)
        return loader

    def count_batch(self, batch: dict, loss: torch.Tensor) -> None:
        """A batch trained on: counted in the epoch (where a resumed run goes on from), its loss and tokens into the
        training log's window."""
        self.state.batches_in_epoch += 1
        self.state.loss_sum += finite_loss(loss.item(), "training", self.state.global_step + 1)
        self.state.loss_batches += 1
        self.state.tokens += sum(len(d) for d in batch.get("documents", ()))  # real tokens, not padding

    def evaluate_and_keep(self) -> None:
        """Validate; keep the weights when best_metric improves; stop early after `patience` validations in a row
        without a better one than this training's best so far (the start's, at step 0, is not counted)."""
        state, cfg = self.state, self.recipe.train
        evaluation_started = time.perf_counter()
        metrics, _ = evaluate_split(self.model, self.corpus.splits["validation"], self.recipe.eval.batch_size,
                                    self.accelerator, description="validation", cached=self.cached.get("validation"),
                                    memory=False)
        value = metrics[cfg.best_metric]
        better = improves(value, state.best_metric, cfg.best_metric)
        entry = {k: metrics[k] for k in HISTORY_METRICS if k in metrics}
        state.history.append({"step": state.global_step, "epoch": state.epoch + 1, **entry})
        self.accelerator.log({f"validation/{k}": v for k, v in entry.items()}, step=state.global_step)
        if better:
            state.best_metric, state.best_step = value, state.global_step
            self.best = trainable_weights(self.core)
        # Patience counts the validations of this training against each other. A trained start's score (step 0)
        # competes to be kept but is no bar to go on: the first end-to-end steps after a head stage dip on
        # validation, and a bar set by the start stopped chunk on 3,000 IMDb reviews after one of its 3 epochs.
        if state.global_step > 0:
            if improves(value, state.trained_best, cfg.best_metric):
                state.trained_best, state.validations_without_improvement = value, 0
            else:
                state.validations_without_improvement += 1
        log.info(f"step {state.global_step}: validation {cfg.best_metric} {value:.4f}"
                 f"{' (best so far, kept)' if better else ''}")
        state.logged_seconds += time.perf_counter() - evaluation_started  # tokens/s counts training time only
        # Early stopping: `patience` validations in a row without a better one than training's best end the training.
        if cfg.early_stopping_patience and state.validations_without_improvement >= cfg.early_stopping_patience:
            state.stopped_early_at_step = state.global_step
            log.info(f"step {state.global_step}: stopping early, {state.validations_without_improvement} "
                     f"validations without a better {cfg.best_metric} (best at step {state.best_step})")

    def log_training(self) -> None:
        """One train_log entry, printed, recorded and sent to the tracker (see close_log_window)."""
        entry = close_log_window(self.state, self.accelerator, self.scheduler, self.started,
                                 counts_tokens=self.cached.get("train") is None, epoch=self.state.epoch + 1)
        log.info(f"step {self.state.global_step}: train loss {entry['loss']:.4f}, "
                 f"learning rate {entry['learning_rate']:.2e}{speed(entry)}")

    def checkpoint(self) -> None:
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            save_checkpoint(self.run_dir / CHECKPOINT, self.core, self.optimizer, self.scheduler, self.state,
                            self.fingerprint, self.best, self.accelerator.num_processes,
                            None if self.reader is None else self.reader.state(), self.start)
