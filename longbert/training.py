"""Training: one loop, read top to bottom. accelerate does device placement, mixed precision and distribution,
so the same code runs on a CPU, one GPU, or many through `accelerate launch`.

A run folder holds:
    recipe.yaml                the resolved recipe (what ran)
    checkpoint/                the last resumable state (written atomically; safetensors + JSON, no pickle)
    best/                      the kept model (best validation metric), loadable by LongDocumentClassifier
    metrics.json, metrics.md   validation history, test metrics, timing, data statistics
    predictions-test.jsonl     per-document test predictions (for error analysis)
"""

from __future__ import annotations

import json
import math
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from longbert.config import Recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.evaluation import evaluate_split, improves, metrics_markdown, write_json, write_predictions
from longbert.hardware import describe_machine, resolve_precision
from longbert.progress import progress

CHECKPOINT = "checkpoint"
BEST = "best"


class TrainingInterrupted(LongbertError):
    """Raised after a clean stop (Ctrl-C or SIGTERM) once the checkpoint is on disk."""


@dataclass
class TrainResult:
    run_dir: Path
    metrics: dict  # what metrics.json holds


@dataclass
class LoopState:
    """Everything besides tensors that a resumed run needs to continue exactly where it stopped."""

    global_step: int = 0  # optimiser steps taken
    epoch: int = 0  # current epoch (0-based)
    batches_in_epoch: int = 0  # batches of the current epoch already consumed
    best_metric: float | None = None
    best_step: int | None = None
    history: list | None = None
    train_seconds: float = 0.0


# ------------------------------------------------------------------------------------------------------------
# Stopping cleanly: the first Ctrl-C / SIGTERM asks the loop to stop after the current optimiser step and write a
# checkpoint; a second Ctrl-C interrupts at once.

_stop_requested = False


def _request_stop(signum, frame):
    global _stop_requested
    if _stop_requested:
        raise KeyboardInterrupt
    _stop_requested = True


def _should_stop(state: LoopState) -> bool:
    return _stop_requested


# ------------------------------------------------------------------------------------------------------------


def train(recipe: Recipe, resume: bool = False, command: str | None = None) -> TrainResult:
    """Train `recipe` into its run folder (recipe.output_dir) and evaluate the kept model on the test split.
    With `resume`, continue the run from its last checkpoint (the recipe must be the same)."""
    global _stop_requested
    _stop_requested = False
    run_dir = Path(recipe.output_dir)
    _check_run_dir(run_dir, recipe, resume)
    previous = {}
    try:
        previous = {s: signal.signal(s, _request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no signal handling
        pass
    try:
        return _train(recipe, run_dir, resume, command)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _check_run_dir(run_dir: Path, recipe: Recipe, resume: bool) -> None:
    saved = run_dir / "recipe.yaml"
    if resume:
        if not (run_dir / CHECKPOINT / "state.json").is_file():
            raise LongbertError(f"--resume: {run_dir} has no checkpoint to continue from")
        if saved.read_text() != recipe_to_yaml(recipe):
            raise LongbertError(
                f"--resume: the recipe differs from the one {run_dir} was started with ({saved}); "
                "resume with the same recipe and overrides"
            )
    elif run_dir.exists() and any(p.name != "recipe.yaml" for p in run_dir.iterdir()):
        # (a folder holding only recipe.yaml is a run that stopped before its first checkpoint: start it again)
        raise LongbertError(
            f"run folder {run_dir} already holds a run; pass --resume to continue it, or set another "
            "output_dir (--set output_dir=...)"
        )


def _train(recipe: Recipe, run_dir: Path, resume: bool, command: str | None) -> TrainResult:
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    from transformers import AutoTokenizer

    from longbert.backbone import prepare_tokenizer, resolve_backbone
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

    # Data first (the head's size depends on the labels), tokenized with the backbone's own tokenizer.
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_backbone(recipe.backbone.name)))
    multi_label = recipe.model.problem_type == "multi_label"
    corpus = load_corpus(recipe.data, tokenizer, recipe.seed, multi_label)
    accelerator.print("data: " + ", ".join(f"{s['documents']} {role} ({s['over_512']} over 512 tokens)"
                                           for role, s in corpus.stats.items()))
    cut = {role: s["cut_by_token_cap"] for role, s in corpus.stats.items() if s["cut_by_token_cap"]}
    if cut:
        accelerator.print(f"data: documents cut at data.max_document_tokens={recipe.data.max_document_tokens}: "
                          + ", ".join(f"{n} in {role}" for role, n in cut.items()))
    model = LongDocumentClassifier.from_recipe(recipe, corpus.label_names)

    if accelerator.is_main_process:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "recipe.yaml").write_text(recipe_to_yaml(recipe))
    accelerator.wait_for_everyone()

    if recipe.model.finetune == "frozen":
        from longbert.frozen import train_frozen_head

        state = train_frozen_head(recipe, model, corpus, accelerator, run_dir / BEST)
    else:
        state = _fine_tune(recipe, model, corpus, accelerator, run_dir, resume)

    # Final evaluation of the kept model on the test split.
    accelerator.wait_for_everyone()
    best = LongDocumentClassifier.from_pretrained(run_dir / BEST).to(accelerator.device)
    metrics = {
        "recipe": recipe.name,
        "strategy": recipe.strategy.name,
        "command": command,
        "machine": describe_machine(),
        "mixed_precision": precision,
        "data": corpus.stats,
        "label_names": corpus.label_names,
        "trainable_parameters": model.trainable_parameters(),
        "train_seconds": state.train_seconds,
        "steps": state.global_step,
        "best_step": state.best_step,
        "best_validation": state.best_metric,
        "best_metric": cfg.best_metric,
        "validation_history": state.history,
    }
    if "test" in corpus.splits:
        test_metrics, raw = evaluate_split(best, corpus.splits["test"], recipe.eval.batch_size, description="test")
        metrics["test"] = test_metrics
        if accelerator.is_main_process:
            write_predictions(run_dir / "predictions-test.jsonl", corpus.splits["test"], raw,
                              corpus.label_names, multi_label)
    if accelerator.is_main_process:
        write_json(run_dir / "metrics.json", metrics)
        page = metrics_markdown(metrics["test"], corpus.label_names, f"{recipe.name}: test") if "test" in metrics else ""
        (run_dir / "metrics.md").write_text(page)
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


def _fine_tune(recipe, model, corpus, accelerator, run_dir: Path, resume: bool) -> LoopState:
    from torch.utils.data import DataLoader
    from transformers import get_linear_schedule_with_warmup

    from longbert.data import collate

    cfg = recipe.train
    train_set = corpus.splits["train"].select_columns(["input_ids", "labels"])
    batches_per_epoch = math.ceil(len(train_set) / (cfg.batch_size * accelerator.num_processes))
    steps_per_epoch = math.ceil(batches_per_epoch / cfg.gradient_accumulation)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)

    optimizer = torch.optim.AdamW(_param_groups(model, cfg))
    scheduler = get_linear_schedule_with_warmup(optimizer, int(cfg.warmup_ratio * total_steps), total_steps)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    core = accelerator.unwrap_model(model)

    state = LoopState(history=[])
    if resume:
        state = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler)
        accelerator.print(f"resuming {run_dir} at step {state.global_step} (epoch {state.epoch + 1})")

    def evaluate_and_keep():
        """Validation metrics; the model is saved to best/ when they improve."""
        metrics, _ = evaluate_split(model, corpus.splits["validation"], recipe.eval.batch_size, accelerator,
                                    description="validation")
        value = metrics[cfg.best_metric]
        better = improves(value, state.best_metric, cfg.best_metric)
        state.history.append({"step": state.global_step, "epoch": state.epoch + 1, "accuracy": metrics["accuracy"],
                              "macro_f1": metrics["macro_f1"], "loss": metrics["loss"]})
        if better:
            state.best_metric, state.best_step = value, state.global_step
            if accelerator.is_main_process:
                core.save_pretrained(run_dir / BEST)
        accelerator.print(f"step {state.global_step}: validation {cfg.best_metric} {value:.4f}"
                          f"{' (best so far, saved)' if better else ''}")

    def checkpoint():
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            save_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, state)

    model.train()
    started = time.perf_counter() - state.train_seconds
    while state.epoch < cfg.epochs and state.global_step < total_steps:
        # The epoch's order depends only on the seed and the epoch, so a resumed run sees the same batches.
        order = torch.Generator().manual_seed(recipe.seed + state.epoch)
        loader = accelerator.prepare(DataLoader(train_set, batch_size=cfg.batch_size, shuffle=True,
                                                generator=order, collate_fn=collate))
        if state.batches_in_epoch:
            loader = accelerator.skip_first_batches(loader, state.batches_in_epoch)
        for batch in progress(loader, f"epoch {state.epoch + 1}/{cfg.epochs}"):
            # Forward and backward; accelerate sums gradients over `gradient_accumulation` batches.
            with accelerator.accumulate(model):
                logits = model(batch["documents"]).logits  # (B, C)
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
            if _should_stop(state):
                checkpoint()
                raise TrainingInterrupted(
                    f"training stopped at step {state.global_step}; the checkpoint is in {run_dir / CHECKPOINT}; "
                    "continue with --resume"
                )
            if state.global_step >= total_steps:
                break
        # End of epoch: evaluate (unless evaluating every N steps already did at this step) and checkpoint.
        state.train_seconds = time.perf_counter() - started
        if not cfg.eval_every_steps or state.global_step % cfg.eval_every_steps:
            evaluate_and_keep()
            model.train()
        state.epoch += 1
        state.batches_in_epoch = 0
        checkpoint()
    return state


# ------------------------------------------------------------------------------------------------------------
# Checkpoints: trainable weights, optimiser and scheduler state, RNG state and the loop state, as safetensors and
# JSON (no pickle). Written to a staging folder, then moved into place: a crash leaves the previous one intact.


def save_checkpoint(directory: Path, model, optimizer, scheduler, state: LoopState) -> None:
    import dataclasses

    from safetensors.torch import save_file

    from longbert.atomic import atomic_folder

    with atomic_folder(directory) as staging:
        weights = {n: p.detach().contiguous().cpu() for n, p in model.named_parameters() if p.requires_grad}
        save_file(weights, staging / "model.safetensors")
        tensors, layout = _flatten_optimizer(optimizer.state_dict())
        tensors["rng.torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            for i, s in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"rng.cuda.{i}"] = s
        save_file(tensors, staging / "optimizer.safetensors")
        extra = {
            "optimizer": layout,
            "scheduler": scheduler.state_dict(),
            "python_random": _jsonable(random.getstate()),
        }
        (staging / "optimizer.json").write_text(json.dumps(extra))
        (staging / "state.json").write_text(json.dumps(dataclasses.asdict(state), indent=2))


def load_checkpoint(directory: Path, model, optimizer, scheduler) -> LoopState:
    from safetensors.torch import load_file

    weights = load_file(directory / "model.safetensors")
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(weights) != trainable:
        raise LongbertError(f"{directory} does not match this model's trainable weights")
    model.load_state_dict(weights, strict=False)
    tensors = load_file(directory / "optimizer.safetensors")
    extra = json.loads((directory / "optimizer.json").read_text())
    optimizer.load_state_dict(_unflatten_optimizer(tensors, extra["optimizer"]))
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    if torch.cuda.is_available():
        cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    random.setstate(_tupled(extra["python_random"]))
    return LoopState(**json.loads((directory / "state.json").read_text()))


def _flatten_optimizer(state_dict: dict) -> tuple[dict, dict]:
    """Optimiser state -> (tensors for safetensors, JSON layout with the non-tensor values)."""
    tensors, layout = {}, {"param_groups": state_dict["param_groups"], "state": {}}
    for index, slots in state_dict["state"].items():
        entry = {}
        for key, value in slots.items():
            if torch.is_tensor(value):
                name = f"optim.{index}.{key}"
                tensors[name] = value.detach().contiguous().cpu()
                entry[key] = {"tensor": name}
            else:
                entry[key] = {"value": value}
        layout["state"][str(index)] = entry
    return tensors, layout


def _unflatten_optimizer(tensors: dict, layout: dict) -> dict:
    state = {}
    for index, entry in layout["state"].items():
        state[int(index)] = {k: tensors[v["tensor"]] if "tensor" in v else v["value"] for k, v in entry.items()}
    return {"state": state, "param_groups": layout["param_groups"]}


def _jsonable(value):
    if isinstance(value, tuple):
        return {"tuple": [_jsonable(v) for v in value]}
    return value


def _tupled(value):
    if isinstance(value, dict) and "tuple" in value:
        return tuple(_tupled(v) for v in value["tuple"])
    if isinstance(value, list):
        return [_tupled(v) for v in value]
    return value
