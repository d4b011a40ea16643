"""Resumable checkpoints: everything a stopped run needs to continue exactly as if it had never stopped.

A checkpoint folder (written whole through `atomic_folder`; safetensors and JSON, no pickle) holds:
    model.safetensors       the trainable weights (the backbone's too in full fine-tuning, adapters in LoRA,
                            the strategy's pooler and the head always)
    best.safetensors        the kept weights (best validation metric so far), when they are not the current ones
    strategy.safetensors    the strategy's own state outside its weights (its `checkpoint_state` hook), if any
    reading.safetensors     train.reading's cache of unit vectors and its counts (longbert.training.selective), if any
    start.safetensors       the weights the stage started from that an earlier stage of the run trained (the head
                            stage's pooler and head, for the end-to-end stage), if any
    optimizer.safetensors   the optimiser's tensors and the torch random states (CPU, and CUDA where present)
    optimizer.json          the optimiser's layout, the scheduler, Python's random state
    state.json              the loop state (with the stage that wrote it and what the stages before it did), the
                            fingerprint of the run's recipe and the number of processes that trained it; written
                            last, so a folder with state.json is a finished checkpoint
One run has one checkpoint folder, which each of its stages writes in turn (longbert.training.trainer).
Nothing in training draws from numpy's random state, so it is not saved.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from longbert.config import recipe_to_yaml
from longbert.errors import LongbertError
from longbert.strategies.base import HasCheckpointState
from longbert.utils.atomic import json_text
from longbert.utils.folders import (
    CHECKPOINT_BEST,
    CHECKPOINT_MODEL,
    CHECKPOINT_OPTIMIZER,
    CHECKPOINT_OPTIMIZER_STATE,
    CHECKPOINT_READING,
    CHECKPOINT_START,
    CHECKPOINT_STRATEGY,
    STATE_FILE,
)
from longbert.utils.outputs import atomic_folder

FORMAT_VERSION = 1
END_TO_END = "end_to_end"  # the stage that trains the recipe's model as it asks (the run's last)


@dataclass
class LoopState:
    """Everything besides tensors that a resumed run needs to continue exactly where it stopped."""

    global_step: int = 0  # optimiser steps taken
    epoch: int = 0  # current epoch (0-based)
    batches_in_epoch: int = 0  # batches of the current epoch already consumed
    best_metric: float | None = None
    best_step: int | None = None
    history: list = dataclasses.field(default_factory=list)  # one entry per validation
    train_seconds: float = 0.0
    train_log: list = dataclasses.field(default_factory=list)  # one entry per `train.log_every_steps` steps
    loss_sum: float = 0.0  # training loss summed over the batches since the last train_log entry ...
    loss_batches: int = 0  # ... and how many batches that was
    tokens: int = 0  # document tokens trained on since the last train_log entry
    logged_seconds: float = 0.0  # train_seconds at the last train_log entry, plus the validation time since
    validations_without_improvement: int = 0  # for early stopping ...
    trained_best: float | None = None  # ... counted against the best validation after step 0, not the start's
    stopped_early_at_step: int | None = None
    stage: str = END_TO_END  # the stage of the run this loop trains (HEAD_STAGE, END_TO_END)
    earlier: dict = dataclasses.field(default_factory=dict)  # what the run's stages before it did, by stage name


def recipe_fingerprint(recipe) -> str:
    """A short hash of the resolved recipe: a checkpoint continues only the recipe that wrote it."""
    return hashlib.sha256(recipe_to_yaml(recipe).encode()).hexdigest()[:16]


def is_finished(directory: Path) -> bool:
    """Whether `directory` holds a complete checkpoint."""
    return (Path(directory) / STATE_FILE).is_file()


def trainable_weights(model) -> dict[str, torch.Tensor]:
    """A CPU copy of the weights that training changes (those with requires_grad), by parameter name."""
    return {n: p.detach().cpu().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_weights(model, weights: dict[str, torch.Tensor], source: str | Path) -> None:
    """Copy `weights` (from `trainable_weights`) into `model`; every trainable weight must be there."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(weights) != trainable:
        raise LongbertError(f"{source} does not match this model's trainable weights "
                            f"({len(set(weights) ^ trainable)} names differ)")
    model.load_state_dict(weights, strict=False)


def save_checkpoint(directory: Path, model, optimizer, scheduler, state: LoopState, fingerprint: str,
                    best: dict[str, torch.Tensor] | None, processes: int = 1,
                    reading: dict[str, torch.Tensor] | None = None, start: dict[str, torch.Tensor] | None = None
                    ) -> None:
    """Write a checkpoint of `model` (the unwrapped LongDocumentClassifier) into `directory`, whole or not at all.
    `best`: the kept weights (from `trainable_weights`), or None before the first validation. `processes`: how many
    processes train the run (a resume must have as many; see runs.check_processes). `reading`: the state of the
    loop's UnitReader (`UnitReader.state`), when it has one. `start`: the weights the stage started from that an
    earlier stage trained (a resumed stage builds its model from them again)."""
    with atomic_folder(directory, STATE_FILE, "checkpoint folder") as staging:
        save_file(trainable_weights(model), staging / CHECKPOINT_MODEL)
        if best is not None and state.best_step != state.global_step:  # else the kept weights are the current ones
            save_file(best, staging / CHECKPOINT_BEST)
        if isinstance(model.strategy, HasCheckpointState):
            save_file({k: v.detach().cpu().contiguous() for k, v in model.strategy.checkpoint_state().items()},
                      staging / CHECKPOINT_STRATEGY)
        if reading is not None:
            save_file(reading, staging / CHECKPOINT_READING)
        if start is not None:
            save_file(start, staging / CHECKPOINT_START)
        tensors, layout = _flatten_optimizer(optimizer.state_dict())
        tensors["rng.torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            for i, s in enumerate(torch.cuda.get_rng_state_all()):
                tensors[f"rng.cuda.{i}"] = s
        save_file(tensors, staging / CHECKPOINT_OPTIMIZER)
        extra = {"optimizer": layout, "scheduler": scheduler.state_dict(),
                 "python_random": _jsonable(random.getstate())}
        (staging / CHECKPOINT_OPTIMIZER_STATE).write_text(json_text(extra, CHECKPOINT_OPTIMIZER_STATE))
        written = {"format": FORMAT_VERSION, "recipe_fingerprint": fingerprint, "processes": processes,
                   "loop": dataclasses.asdict(state)}
        (staging / STATE_FILE).write_text(json_text(written, STATE_FILE, indent=2))


def read_reading(directory: Path) -> dict[str, torch.Tensor] | None:
    """The UnitReader state a checkpoint holds (None: it holds none)."""
    file = Path(directory) / CHECKPOINT_READING
    return load_file(file) if file.is_file() else None


def read_stage(directory: Path) -> tuple[LoopState, dict[str, torch.Tensor] | None] | None:
    """The loop state of the checkpoint in `directory` (its `stage`, and `earlier`: what the stages before it did) and
    the weights that stage started from (None: it started from none an earlier stage trained); None where the
    directory holds no finished checkpoint."""
    if not is_finished(directory):
        return None
    start = Path(directory) / CHECKPOINT_START
    return LoopState(**_read_state(Path(directory))["loop"]), (load_file(start) if start.is_file() else None)


def read_fingerprint(directory: Path) -> str | None:
    """The fingerprint of the recipe that wrote the checkpoint in `directory`."""
    return _read_state(Path(directory)).get("recipe_fingerprint")


def read_processes(directory: Path) -> int | None:
    """How many processes trained the run whose checkpoint is in `directory` (None: a checkpoint written before
    longbert recorded it)."""
    return _read_state(Path(directory)).get("processes")


def load_checkpoint(directory: Path, model, optimizer, scheduler, fingerprint: str
                    ) -> tuple[LoopState, dict[str, torch.Tensor] | None]:
    """Restore a checkpoint written by `save_checkpoint` into `model`, `optimizer`, `scheduler`, the strategy and the
    random states. Returns the loop state and the kept weights (None before the first validation)."""
    directory = Path(directory)
    saved = _read_state(directory)
    if saved.get("recipe_fingerprint") != fingerprint:
        raise LongbertError(f"the checkpoint in {directory} was written by another recipe; "
                            "resume with the recipe and overrides that started it")
    state = LoopState(**saved["loop"])
    load_trainable_weights(model, load_file(directory / CHECKPOINT_MODEL), directory / CHECKPOINT_MODEL)
    best = None
    if (directory / CHECKPOINT_BEST).is_file():
        best = load_file(directory / CHECKPOINT_BEST)
    elif state.best_step is not None:
        best = trainable_weights(model)  # the kept weights were the current ones
    if isinstance(model.strategy, HasCheckpointState):
        model.strategy.load_checkpoint_state(load_file(directory / CHECKPOINT_STRATEGY))
    tensors = load_file(directory / CHECKPOINT_OPTIMIZER)
    extra = json.loads((directory / CHECKPOINT_OPTIMIZER_STATE).read_text())
    saved_groups = [len(group["params"]) for group in extra["optimizer"]["param_groups"]]
    if saved_groups != [len(group["params"]) for group in optimizer.param_groups]:
        # An earlier longbert put biases and norms of the head in the decayed group: its optimiser state does not fit.
        raise LongbertError(f"the checkpoint in {directory} holds the optimiser of another parameter grouping (an "
                            "earlier longbert's); start the run again")
    optimizer.load_state_dict(_unflatten_optimizer(tensors, extra["optimizer"]))
    scheduler.load_state_dict(extra["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("rng.cuda."))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
    random.setstate(_tupled(extra["python_random"]))
    return state, best


def _read_state(directory: Path) -> dict:
    try:
        saved = json.loads((directory / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise LongbertError(f"{directory} holds no readable checkpoint ({error})") from None
    if saved.get("format") != FORMAT_VERSION:
        raise LongbertError(f"the checkpoint in {directory} was written by another longbert checkpoint format "
                            f"({saved.get('format')}); start the run again")
    return saved


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
