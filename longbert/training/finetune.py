"""Training: one loop, read top to bottom, for every fine-tuning mode. accelerate does device placement, mixed
precision and distribution, so the same code runs on a CPU, one GPU, or many through `accelerate launch`.
Frozen mode runs the same loop; only a batch differs (each document's cached unit vectors instead of its token ids),
and only the strategy's pooler and the head train.

A run folder holds:
    recipe.yaml                the resolved recipe (what ran)
    checkpoint/                the last resumable state (see longbert.training.checkpoint); written whole or not at all
    best/                      the kept model (best validation metric), loadable by LongDocumentClassifier and by
                               transformers' Auto classes; written when training ends, its model card (README.md)
                               refreshed with the test metrics
    metrics.json, metrics.md   training log (loss, learning rate, tokens/s), validation history, test metrics, timing,
                               data statistics, what train.init_from loaded
    predictions-test.jsonl     per-document test predictions (for error analysis)
    predictions-validation.jsonl  the kept model's validation predictions (compare's ensembles are chosen on them)
    logs/                      the tracker's files, when train.report_to names one that writes here (tensorboard)
    start/                     the model given to `train(model=...)`, which train.init_from names
One process writes a run folder at a time (longbert.training.start_or_resume locks it); what a killed run left there (a
half-written checkpoint, a swap cut between its two renames) is put right when the next run starts, with or without
--resume. The scaffolding this loop shares with pretraining's lives in the training package's other modules.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate.utils import set_seed
from transformers import get_linear_schedule_with_warmup

from longbert.config import Recipe, head_epochs, is_multi_label
from longbert.data.carving import check_run_data_unchanged
from longbert.evaluation.metrics import HISTORY_METRICS, improves
from longbert.evaluation.split_pass import evaluate_split, model_inputs, split_loader
from longbert.modeling.card import TrainingFacts
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.training.accelerator import check_tracker, start_accelerator, tracker_config
from longbert.training.checkpoint import (
    LoopState,
    load_checkpoint,
    read_reading,
    recipe_fingerprint,
    save_checkpoint,
    trainable_weights,
)
from longbert.training.class_weights import class_weights_for
from longbert.training.contrastive import train_contrastive_stage
from longbert.training.finishing import restore_kept_model, run_metrics, test_and_write_results
from longbert.training.frozen import cache_splits
from longbert.training.head_stage import train_head_stage
from longbert.training.init_from import build_model, check_labels, open_init_from
from longbert.training.optim import optimizer_step, param_groups
from longbert.training.run_inputs import RunInputs, load_inputs, say_what_is_read
from longbert.training.run_record import RunMetrics, TrainResult
from longbert.training.selective import UnitReader, unit_reader
from longbert.training.self_training import add_pseudo_labelled, train_teacher
from longbert.training.start_or_resume import open_run, write_recipe
from longbert.training.stopping import StopRequest, finite_loss, interrupted
from longbert.training.train_inputs import as_recipe, recipe_and_documents, recipe_for_model, save_start
from longbert.training.train_log import close_log_window, speed
from longbert.utils.folders import BEST, CHECKPOINT, PSEUDO_FILE, SELF_TRAINING, TRACKER_LOGS
from longbert.utils.hardware import adamw
from longbert.utils.logs import main_process_logger
from longbert.utils.progress import progress

log = main_process_logger(__name__)  # on the main process only



def train(recipe: Recipe | str | Path | None = None, *, model: LongDocumentClassifier | None = None,
          train_dataset=None, eval_dataset=None, data=None, resume: bool = False, command: str | None = None,
          stop: StopRequest | None = None) -> TrainResult:
    """Train `recipe` (a Recipe, a recipe file or packaged name; None: the defaults) into its run folder and evaluate
    the kept model on the test split, if any. Returns a TrainResult (`folder`, `metrics`, `model`: <folder>/best).
    `model`: a LongDocumentClassifier to fine-tune; its backbone, strategy, problem type and classes are the run's,
    and it is saved as the run's start (see longbert.training.train_inputs). `train_dataset`, `eval_dataset`:
    documents in memory (Dataset, DataFrame, (texts, labels), rows, columns) to train and validate on (none: carved
    from train); `data`: documents by split instead of data.path (see longbert.data.objects). `resume`: continue from
    the last checkpoint (same recipe, documents and model). `stop`: checked after every optimiser step; once set, a
    checkpoint is written and TrainingInterrupted raised (Ctrl-C and SIGTERM set it; a second Ctrl-C stops at once)."""
    recipe, data = recipe_and_documents(as_recipe(recipe), train_dataset, eval_dataset, data)
    if model is not None:
        recipe = recipe_for_model(recipe, model)
    run_dir = Path(recipe.output_dir)
    stop = threading.Event() if stop is None else stop
    check_tracker(recipe.train.report_to)
    source = open_init_from(recipe) if model is None else None  # checked before the run folder is touched
    if resume:  # a resumed run reads the documents its split was made of, or none
        check_run_data_unchanged(run_dir, f"train --resume {run_dir}")
    with open_run(run_dir, recipe, resume, stop) as resuming:
        if model is not None:
            save_start(model, recipe)
            source = open_init_from(recipe)
        return _train_in_stages(recipe, run_dir, resuming, command, stop, data, source)


def _train_in_stages(recipe: Recipe, run_dir: Path, resume: bool, command: str | None, stop: StopRequest, data,
                     source, inputs: RunInputs | None = None, last: bool = True) -> TrainResult:
    """The stages a recipe asks for, in order, each starting from what the one before left, then the run itself:
    contrastive tuning of the backbone (train.contrastive_pairs), a teacher that pseudo-labels unlabelled documents
    (train.self_training_documents; itself trained in stages), the pooler and head alone (train.head_first). Every
    stage reads `inputs` (loaded here when None): one split for the run. `last`: this run is the outermost one, whose
    main stage may train the loaded backbone itself."""
    loading = inputs is None
    inputs = load_inputs(recipe, data) if loading else inputs
    if source is not None:  # the data's classes must be the earlier model's: one error line, nothing printed before
        check_labels(source, inputs.corpus.label_names)
    if loading:
        say_what_is_read(recipe, inputs.corpus)
    stages, corpus = {}, inputs.corpus
    if recipe.train.contrastive_pairs:  # the backbone first tuned on pairs of documents (SetFit); the rest from it
        stages["contrastive_stage"], source = train_contrastive_stage(recipe, run_dir, source, stop, corpus,
                                                                      (inputs.backbone_for_stage(), inputs.tokenizer))
    if recipe.train.self_training_documents:  # a teacher from the same start; its confident labels join training
        teacher_inputs = RunInputs(inputs.backbone, inputs.tokenizer, corpus.without("test"))

        def run_teacher(teacher: Recipe, resume_teacher: bool, source) -> RunMetrics:
            return _train_in_stages(teacher, Path(teacher.output_dir), resume_teacher, command, stop, data,
                                    source, teacher_inputs, last=False).record

        stages["self_training"] = train_teacher(recipe, run_dir, source, stop, run_teacher, data)
        corpus = add_pseudo_labelled(corpus.without(), run_dir / SELF_TRAINING / PSEUDO_FILE, inputs.tokenizer,
                                     recipe.data)
    # The pooler and head first, on the frozen backbone; the whole model from there (a frozen run is that stage).
    if recipe.train.head_first and not recipe.model.backbone_frozen:
        def run_head_stage(head: Recipe, resume_head: bool, source) -> RunMetrics:
            return _train(head, Path(head.output_dir), resume_head, command, stop, source, corpus.without("test"),
                          (inputs.backbone_for_stage(), inputs.tokenizer), untrained_allowed=True).record

        stages["head_stage"], source = train_head_stage(recipe, run_dir, source, stop, run_head_stage)
    return _train(recipe, run_dir, resume, command, stop, source, corpus,
                  (inputs.backbone_for_stage(last), inputs.tokenizer), stages)


def _train(recipe: Recipe, run_dir: Path, resume: bool, command: str | None, stop: StopRequest, source, corpus,
           loaded: tuple, stages: dict | None = None, untrained_allowed: bool = False) -> TrainResult:
    """One stage trained into `run_dir`: the model built around `loaded` (backbone, tokenizer), trained and validated
    on `corpus` (the run's documents), kept, tested when the corpus has a test split, and written."""
    cfg = recipe.train
    tracker = None if cfg.report_to == "none" else cfg.report_to
    accelerator, precision = start_accelerator(cfg.mixed_precision, cfg.gradient_accumulation, tracker, run_dir)
    set_seed(recipe.seed)
    model, started_from, class_weights = _build_model(recipe, corpus, loaded, source)
    cached, cache_seconds = cache_splits(recipe, model, corpus, accelerator, untrained_allowed)
    if accelerator.is_main_process:
        write_recipe(run_dir, recipe, corpus.file_split)
    accelerator.wait_for_everyone()

    if tracker is not None:
        accelerator.init_trackers(TRACKER_LOGS, config=tracker_config(recipe))
    try:
        state, model, best, reading = _fit(recipe, model, corpus, cached, accelerator, run_dir, resume, stop,
                                           class_weights, started_trained=source is not None and source.head_trained)
    finally:
        if tracker is not None:
            accelerator.end_training()

    core, validation_raw, calibration = restore_kept_model(recipe, model, best, corpus, cached, accelerator)
    # The model card in best/ says what this run knew: written with the model, refreshed once the test metrics exist.
    validation = next((entry for entry in state.history if entry["step"] == state.best_step), None)
    core.training_facts = TrainingFacts.from_run(recipe, corpus.stats, command, cfg.best_metric, validation,
                                                 started_from)
    if accelerator.is_main_process:
        core.save_pretrained(run_dir / BEST)
    record = run_metrics(recipe, core, corpus, state, command, started_from, precision, cache_seconds, stages or {})
    record.calibration = None if calibration is None else calibration.to_dict()
    record.reading = None if reading is None else {**reading.record(), "seconds": round(state.train_seconds, 2)}
    test_and_write_results(recipe, run_dir, core, corpus, record, validation_raw, accelerator)
    return TrainResult.from_run(run_dir, record, core.eval())


def _build_model(recipe: Recipe, corpus, loaded: tuple, source) -> tuple:
    """The model around the loaded backbone, for the corpus's classes. Returns the model, what train.init_from
    loaded (None without it) and the loss's class weights (None without model.class_weights)."""
    multi_label = is_multi_label(recipe.model.problem_type)
    # With train.init_from, the earlier model's weights replace the new ones where they fit (training/init_from.py);
    # a resumed run loads its checkpoint over them in _fit.
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


def _fit(recipe, model, corpus, cached, accelerator, run_dir: Path, resume: bool, stop: StopRequest,
         class_weights: torch.Tensor | None = None, started_trained: bool = False):
    """The loop. `cached`: frozen mode's unit vectors per split (None when the backbone trains). `class_weights`:
    (C,) loss weights or None. `started_trained`: the model starts from trained weights (train.init_from, or the head
    stage of train.head_first), which are then validated at step 0 and kept unless training beats them. Returns the
    loop state, the prepared model and the kept weights (from `trainable_weights`)."""
    cfg = recipe.train
    epochs = head_epochs(cfg, head_stage=False) if cached is not None else cfg.epochs
    total_steps = _total_steps(cfg, epochs, len(corpus.splits["train"]), accelerator.num_processes)
    reader = None if cached is not None else unit_reader(recipe, model, corpus, accelerator)  # before the optimiser
    loop = _start_loop(recipe, model, corpus, cached or {}, accelerator, run_dir, resume, total_steps, reader)
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
                total_steps: int, reader: UnitReader | None = None) -> _Loop:
    """The optimiser and the schedule, prepared with the model; with `resume`, the checkpoint loaded over them."""
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
    fingerprint = recipe_fingerprint(recipe)
    state, best = LoopState(), None
    if resume:
        state, best = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        log.info(f"resuming {run_dir} at step {state.global_step} (epoch {state.epoch + 1})")
        if reader is not None and (saved := read_reading(run_dir / CHECKPOINT)) is not None:
            reader.load_state(saved)
    return _Loop(recipe, corpus, cached, accelerator, run_dir, model, core, optimizer, scheduler, fingerprint, state,
                 best, reader)


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
    """What the steps of _fit's loop share: the prepared model, optimiser and scheduler, the loop state, and the kept
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
                            None if self.reader is None else self.reader.state())
