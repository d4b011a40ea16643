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
One process writes a run folder at a time (longbert.training.runs locks it); what a killed run left there (a
half-written checkpoint, a swap cut between its two renames) is put right when the next run starts, with or without
--resume. The scaffolding this loop shares with pretraining's (accelerator, stop requests, parameter groups, the
optimiser step, the training log) lives in the training package's other modules.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from longbert.config import Recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.evaluation.command import metrics_markdown, write_json, write_predictions
from longbert.evaluation.inference import evaluate_split, model_inputs, split_loader
from longbert.evaluation.metrics import HISTORY_METRICS, improves, tune_thresholds
from longbert.training.accelerator import check_tracker, start_accelerator, tracker_config
from longbert.training.checkpoint import (
    LoopState,
    load_checkpoint,
    load_trainable_weights,
    recipe_fingerprint,
    save_checkpoint,
    trainable_weights,
)
from longbert.training.curves import CURVES_FILE, write_training_curves
from longbert.training.head_stage import train_head_stage
from longbert.training.init_from import build_model, check_labels, open_init_from
from longbert.training.optim import optimizer_step, param_groups
from longbert.training.runs import BEST, CHECKPOINT, RECIPE, open_run
from longbert.training.stopping import StopRequest, TrainingInterrupted, interrupted
from longbert.training.train_log import close_log_window, speed
from longbert.utils.hardware import adamw, describe_machine
from longbert.utils.logs import main_process_logger
from longbert.utils.progress import progress

log = main_process_logger(__name__)  # on the main process only

# TrainingInterrupted and StopRequest live in longbert.training.stopping; they are named here too, where callers of
# `train` have always imported them from.
__all__ = ["StopRequest", "TrainResult", "TrainingInterrupted", "class_weights_for", "train"]

TRACKER_LOGS = "logs"  # the trackers' folder inside the run folder (tensorboard writes its event files there)


@dataclass
class TrainResult:
    run_dir: Path
    metrics: dict  # what metrics.json holds


def train(recipe: Recipe, resume: bool = False, command: str | None = None,
          stop: StopRequest | None = None, data=None) -> TrainResult:
    """Train `recipe` into its run folder (recipe.output_dir) and evaluate the kept model on the test split.
    With `resume`, continue the run from its last checkpoint (the recipe must be the same).
    `stop`: checked once after every optimiser step; once set, training writes a checkpoint and raises
    TrainingInterrupted. Ctrl-C and SIGTERM set it (in the main thread); a second Ctrl-C interrupts at once.
    `data`: documents in memory instead of data.path (a datasets.Dataset or DatasetDict, a pandas DataFrame, texts
    and labels; see longbert.data.objects); the recipe's other data settings apply, and the recipe saved in the run
    folder says what kind of object it was and its rows per split."""
    from longbert.data.objects import recipe_for_data_object

    if data is not None:
        recipe = recipe_for_data_object(recipe, data)
    run_dir = Path(recipe.output_dir)
    stop = threading.Event() if stop is None else stop
    check_tracker(recipe.train.report_to)
    source = open_init_from(recipe)  # train.init_from, checked before the run folder is touched
    with open_run(run_dir, recipe, resume, stop) as resuming:
        head_stage = None
        if recipe.train.head_first:  # the pooler and head first, on the frozen backbone; the whole model from there
            def run_head_stage(head: Recipe, resume_head: bool, source) -> dict:
                return _train(head, Path(head.output_dir), resume_head, command, stop, data, source,
                              untrained_allowed=True).metrics

            head_stage, source = train_head_stage(recipe, run_dir, source, stop, run_head_stage)
        return _train(recipe, run_dir, resuming, command, stop, data, source, head_stage)


def class_weights_for(setting, train_labels: list, label_names: list[str], multi_label: bool) -> torch.Tensor | None:
    """`model.class_weights` as a (C,) tensor for the loss, or None. balanced: n_documents / (n_classes * count) per
    class (scikit-learn's "balanced"); for multi-label, each label's negatives / positives (its pos_weight). A list
    must hold one weight per class. balanced with a class (a label) that no training document has is refused, as
    scikit-learn refuses it: its weight would be made up."""
    if setting is None:
        return None
    n_classes = len(label_names)
    if isinstance(setting, list):
        if len(setting) != n_classes:
            raise LongbertError(f"model.class_weights has {len(setting)} weights but the data has {n_classes} "
                                f"classes ({', '.join(label_names)})")
        return torch.tensor(setting, dtype=torch.float32)
    labels = np.asarray(train_labels)
    counts = labels.sum(0) if multi_label else np.bincount(labels, minlength=n_classes)  # (C,) positives / documents
    absent = [name for name, count in zip(label_names, counts) if count == 0]
    if absent:
        kind = "label" if multi_label else "class"
        raise LongbertError(f"model.class_weights balanced: no training document has the {kind}"
                            f"{'s' if len(absent) > 1 else ''} {', '.join(absent)}; give the weights as a list, one "
                            f"per {kind}, or train on documents of {'them' if len(absent) > 1 else 'it'}")
    if multi_label:
        return torch.tensor((len(labels) - counts) / counts, dtype=torch.float32)
    return torch.tensor(len(labels) / (n_classes * counts), dtype=torch.float32)


def _train(recipe: Recipe, run_dir: Path, resume: bool, command: str | None, stop: StopRequest,
           data=None, source=None, head_stage: dict | None = None, untrained_allowed: bool = False) -> TrainResult:
    from accelerate.utils import set_seed

    from longbert.data.documents import load_corpus
    from longbert.modeling.backbone import load_backbone
    from longbert.modeling.card import TrainingFacts, refresh_card
    from longbert.training import frozen
    from longbert.utils.atomic import write_text_atomically

    cfg = recipe.train
    tracker = None if cfg.report_to == "none" else cfg.report_to
    accelerator, precision = start_accelerator(cfg.mixed_precision, cfg.gradient_accumulation, tracker, run_dir)
    set_seed(recipe.seed)

    # The backbone and its tokenizer, loaded once; the data (the head's size depends on the labels), tokenized
    # with that tokenizer; then the model around that backbone.
    backbone, tokenizer = load_backbone(recipe.backbone.name, recipe.backbone.attention_dropout,
                                        recipe.backbone.hidden_dropout)
    multi_label = recipe.model.problem_type == "multi_label"
    corpus = load_corpus(recipe.data, tokenizer, recipe.seed, multi_label, source=data)
    if source is not None:  # the data's classes must be the earlier model's: one error line, nothing printed before
        check_labels(source, corpus.label_names)
    log.info(corpus.summary())
    cut = {role: s["cut_by_token_cap"] for role, s in corpus.stats.items() if s["cut_by_token_cap"]}
    if cut:
        log.info(f"data: documents cut at data.max_document_tokens={recipe.data.max_document_tokens}: "
                          + ", ".join(f"{n} in {role}" for role, n in cut.items()))
    # With train.init_from, the earlier model's weights replace the new ones where they fit (training/init_from.py);
    # a resumed run loads its checkpoint over them in _fit.
    model, started_from = build_model(recipe, corpus.label_names, (backbone, tokenizer), source)
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

    # Frozen mode: the backbone reads train and validation once; the loop trains on what it wrote.
    cached, cache_seconds = None, 0.0
    if model.frozen:
        if not untrained_allowed:  # a head stage leaves such weights (recurrence's biases) to the stage after it
            frozen.refuse_untrainable(model)
        model.to(accelerator.device)
        started = time.perf_counter()
        cached = {split: frozen.cache_units(model, corpus.splits[split], recipe.eval.batch_size,
                                            f"caching {split} embeddings") for split in ("train", "validation")}
        cache_seconds = time.perf_counter() - started
        log.info(f"cached {sum(map(len, cached.values()))} documents' embeddings in {cache_seconds:.1f}s")

    if accelerator.is_main_process:
        write_text_atomically(run_dir / RECIPE, recipe_to_yaml(recipe))
    accelerator.wait_for_everyone()

    if tracker is not None:
        accelerator.init_trackers(TRACKER_LOGS, config=tracker_config(recipe))
    try:
        state, model, best = _fit(recipe, model, corpus, cached, accelerator, run_dir, resume, stop, class_weights,
                                  started_trained=started_from is not None)
    finally:
        if tracker is not None:
            accelerator.end_training()

    # The kept model: its weights back into the model in memory, saved as best/, evaluated on the test split
    # (token ids, in every mode: the test measures the whole model). No autocast wrapper from training is left on.
    accelerator.wait_for_everyone()
    core = accelerator.unwrap_model(model, keep_fp32_wrapper=False)
    if best is not None:
        load_trainable_weights(core, best, "the kept weights")
    # The kept model's validation predictions, made once: multi-label thresholds are tuned on them, and compare
    # chooses its ensembles on them (never on the test split).
    validation_raw = None
    if "validation" in corpus.splits:
        _, validation_raw = evaluate_split(core, corpus.splits["validation"], recipe.eval.batch_size,
                                           description="validation", cached=cached["validation"] if cached else None,
                                           process=accelerator.state)
    if multi_label and isinstance(threshold, str):
        # The kept model's decision thresholds, tuned on its validation predictions; saved with it.
        core.settings.thresholds = tune_thresholds(validation_raw["labels"], validation_raw["probabilities"],
                                                   threshold == "tune_per_label")
        log.info("multi-label thresholds tuned on validation: " + ", ".join(
            f"{n} {t:.3f}" for n, t in zip(corpus.label_names, core.settings.thresholds)))
    # The model card in best/ says what this run knew: written with the model, refreshed once the test metrics exist.
    validation = next((entry for entry in state.history if entry["step"] == state.best_step), None)
    core.training_facts = TrainingFacts.from_run(recipe, corpus.stats, command, cfg.best_metric, validation,
                                                 started_from)
    if accelerator.is_main_process:
        core.save_pretrained(run_dir / BEST)
    metrics = {
        "recipe": recipe.name,
        "strategy": recipe.strategy.name,
        # The strategy's settings as the model was built with them (token_pooling's auto resolved).
        "strategy_settings": dataclasses.asdict(core.settings.strategy),
        "command": command,
        **({"init_from": started_from} if started_from else {}),
        "machine": describe_machine(),
        "mixed_precision": precision,
        "data": corpus.stats,
        "label_names": corpus.label_names,
        "trainable_parameters": core.trainable_parameters(),
        # With train.head_first, the head stage's time too: what the whole recipe took to train.
        "train_seconds": cache_seconds + state.train_seconds + (head_stage["train_seconds"] if head_stage else 0.0),
        **({"head_stage": head_stage} if head_stage else {}),
        "steps": state.global_step,
        "best_step": state.best_step,
        "best_validation": state.best_metric,
        "best_metric": cfg.best_metric,
        "stopped_early_at_step": state.stopped_early_at_step,
        "train_log": state.train_log,
        "validation_history": state.history,
    }
    if multi_label:
        metrics["thresholds"] = core.thresholds
    if validation_raw is not None and accelerator.is_main_process:
        write_predictions(run_dir / "predictions-validation.jsonl", corpus.splits["validation"], validation_raw,
                          corpus.label_names, multi_label, core.thresholds if multi_label else None)
    if "test" in corpus.splits:
        test_metrics, raw = evaluate_split(core, corpus.splits["test"], recipe.eval.batch_size, description="test",
                                           process=accelerator.state)  # divided between the processes
        metrics["test"] = test_metrics
        if accelerator.is_main_process:
            write_predictions(run_dir / "predictions-test.jsonl", corpus.splits["test"], raw,
                              corpus.label_names, multi_label, core.thresholds if multi_label else None)
    if accelerator.is_main_process:
        write_json(run_dir / "metrics.json", metrics)
        page = metrics_markdown(metrics["test"], corpus.label_names, f"{recipe.name}: test",
                                run_dir / "confusion-matrix.png") if "test" in metrics else ""
        if write_training_curves(metrics, run_dir / CURVES_FILE):
            page += f"\n## Training\n\n![training loss and validation {cfg.best_metric}]({CURVES_FILE})\n"
        write_text_atomically(run_dir / "metrics.md", page)
        if "test" in metrics:
            core.training_facts.test = metrics["test"]
            refresh_card(run_dir / BEST, core)
    return TrainResult(run_dir, metrics)


def _fit(recipe, model, corpus, cached, accelerator, run_dir: Path, resume: bool, stop: StopRequest,
         class_weights: torch.Tensor | None = None, started_trained: bool = False):
    """The loop. `cached`: frozen mode's unit vectors per split (None when the backbone trains). `class_weights`:
    (C,) loss weights or None. `started_trained`: the model starts from trained weights (train.init_from, or the head
    stage of train.head_first), which are then validated at step 0 and kept unless training beats them. Returns the
    loop state, the prepared model and the kept weights (from `trainable_weights`)."""
    from transformers import get_linear_schedule_with_warmup

    cfg = recipe.train
    epochs = cfg.frozen_head_epochs if cached is not None else cfg.epochs
    cached = cached or {}
    batches_per_epoch = math.ceil(len(corpus.splits["train"]) / (cfg.batch_size * accelerator.num_processes))
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation)
    total_steps = epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)

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

    state, best = LoopState(), None  # best: a CPU copy of the kept weights, taken when validation improves
    if resume:
        state, best = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        log.info(f"resuming {run_dir} at step {state.global_step} (epoch {state.epoch + 1})")

    def evaluate_and_keep():
        nonlocal best
        evaluation_started = time.perf_counter()
        metrics, _ = evaluate_split(model, corpus.splits["validation"], recipe.eval.batch_size, accelerator,
                                    description="validation", cached=cached.get("validation"))
        value = metrics[cfg.best_metric]
        better = improves(value, state.best_metric, cfg.best_metric)
        entry = {k: metrics[k] for k in HISTORY_METRICS if k in metrics}
        state.history.append({"step": state.global_step, "epoch": state.epoch + 1, **entry})
        accelerator.log({f"validation/{k}": v for k, v in entry.items()}, step=state.global_step)
        if better:
            state.best_metric, state.best_step = value, state.global_step
            state.validations_without_improvement = 0
            best = trainable_weights(core)
        else:
            state.validations_without_improvement += 1
        log.info(f"step {state.global_step}: validation {cfg.best_metric} {value:.4f}"
                          f"{' (best so far, kept)' if better else ''}")
        state.logged_seconds += time.perf_counter() - evaluation_started  # tokens/s counts training time only
        # Early stopping: `patience` validations in a row without a better best_metric end the training.
        if cfg.early_stopping_patience and state.validations_without_improvement >= cfg.early_stopping_patience:
            state.stopped_early_at_step = state.global_step
            log.info(f"step {state.global_step}: stopping early, {state.validations_without_improvement} "
                              f"validations without a better {cfg.best_metric} (best at step {state.best_step})")

    def log_training():
        """One train_log entry, printed, recorded and sent to the tracker (see close_log_window)."""
        entry = close_log_window(state, accelerator, scheduler, started, counts_tokens=cached.get("train") is None,
                                 epoch=state.epoch + 1)
        log.info(f"step {state.global_step}: train loss {entry['loss']:.4f}, "
                          f"learning rate {entry['learning_rate']:.2e}{speed(entry)}")

    def checkpoint():
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            save_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, state, fingerprint, best,
                            accelerator.num_processes)

    if started_trained and not state.history:  # the start is a candidate: fine-tuning must beat it to replace it
        evaluate_and_keep()
    model.train()
    started = time.perf_counter() - state.train_seconds
    while state.epoch < epochs and state.stopped_early_at_step is None:
        # The epoch's order depends only on the seed and the epoch, so a resumed run sees the same batches.
        loader = accelerator.prepare(split_loader(corpus.splits["train"], cfg.batch_size, cached.get("train"),
                                                  shuffle_seed=recipe.seed + state.epoch,
                                                  group_by_length=cfg.group_by_length))
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(loader, state.batches_in_epoch)
        for batch in progress(loader, f"epoch {state.epoch + 1}/{epochs}"):
            if state.global_step >= total_steps:  # max_steps reached (here too when resuming at that very step)
                break
            # Forward and backward; accelerate sums the gradients of `gradient_accumulation` batches, and the
            # optimiser step (clip, step, schedule) acts once they are complete.
            with accelerator.accumulate(model):
                output = model(**model_inputs(batch))
                loss = core.loss(output.logits, batch["labels"], class_weights)  # logits (B, C)
                if cfg.unit_loss_weight:  # each unit also learns its document's label (core.unit_loss)
                    loss = loss + cfg.unit_loss_weight * core.unit_loss(output.units, batch["labels"], class_weights)
                accelerator.backward(loss)
                optimizer_step(accelerator, model, optimizer, scheduler, cfg.max_grad_norm, trim=cfg.trim_heap)
            state.batches_in_epoch += 1
            state.loss_sum += loss.item()
            state.loss_batches += 1
            state.tokens += sum(len(d) for d in batch.get("documents", ()))  # real tokens, not padding
            if not accelerator.sync_gradients:
                continue
            state.global_step += 1
            state.train_seconds = time.perf_counter() - started
            # Log every L steps; evaluate every N steps when asked; checkpoint every M steps (and when stopping
            # early); stop cleanly on request.
            if state.global_step % cfg.log_every_steps == 0:
                log_training()
            if cfg.eval_every_steps and state.global_step % cfg.eval_every_steps == 0:
                evaluate_and_keep()
                model.train()
            if state.stopped_early_at_step is not None:
                break
            if state.global_step % cfg.checkpoint_every_steps == 0:
                checkpoint()
            if stop.is_set():
                checkpoint()
                raise interrupted("training", state.global_step, run_dir / CHECKPOINT)
        # End of epoch (or of max_steps, or early stopping): evaluate (unless evaluating every N steps already did at
        # this step), log the batches since the last log line when training ends here, and checkpoint.
        state.train_seconds = time.perf_counter() - started
        if not cfg.eval_every_steps or state.global_step % cfg.eval_every_steps:
            evaluate_and_keep()
            model.train()
        ending = (state.epoch + 1 == epochs or state.global_step >= total_steps
                  or state.stopped_early_at_step is not None)
        if ending and state.loss_batches:
            log_training()
        state.epoch += 1
        state.batches_in_epoch = 0
        checkpoint()
        if state.global_step >= total_steps:
            break
    return state, model, best
