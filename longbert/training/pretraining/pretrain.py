"""Continued pretraining (`longbert pretrain RECIPE_FILE`): masked-language-model training on unlabelled long text, read
the way a strategy reads a document.

BERT learnt its weights by predicting hidden tokens of texts of at most 512 tokens (Devlin et al. 2019). A strategy
that reads further shows the backbone something it has never seen: bigbird's positions past 512 start as copies or
interpolations and its attention is block-sparse; recurrence's segments also attend to a memory of the previous
one. Continuing the same objective on unlabelled documents, read through the strategy's own attention (its
`encode_tokens` hook), lets the backbone adapt before a single label is used: the semi-supervised step of BERT at
document length (Longformer did it for RoBERTa: MLM bits-per-character 1.957 with copied positions, 1.753 after 2K
steps of continued pretraining). A strategy without the hook (truncate, chunk, sliding, rmt) is pretrained on plain
consecutive windows of the backbone's positions: the baseline of an ordinary BERT reading the same text.

What trains: the backbone and the MLM head (mlm.py). The strategy's own weights (recurrence's
distance bias, poolers) stay as they were built, so that a fine-tuning run that starts from the written backbone
builds the strategy the backbone was adapted to.

The MLM head. A backbone that ships without one (minilm) starts with a random one, whose loss says nothing about
the backbone. `train.head_steps` then trains the head alone first (the backbone gets no gradient and is unchanged):
the held-out loss after them is the backbone's honest "before", the one at step 0 is reported as "start".

Masking is BERT's (masking.py beside this module), seeded so that a resumed run masks as an uninterrupted one; the
held-out loss is measured by document position (heldout.py).

A run folder holds:
    recipe.yaml              the resolved pretraining recipe (what ran)
    checkpoint/              the last resumable state (longbert.training.checkpoint): weights of the backbone and the
                             head, optimiser, scheduler, random states, the held-out measurements so far
    backbone/                the trained encoder with its MLM head and tokenizer (positions extended for bigbird):
                             a transformers model folder, loadable by AutoModel.from_pretrained and usable as a
                             training recipe's backbone.name (a sentence-transformers pooling config is copied
                             along, so `token_pooling: auto` reads it as it read the original)
    metrics.json, metrics.md held-out MLM loss and perplexity, overall and by document position ([CLS] at 0): within
                             the positions the backbone had learned (0-511 for BERT) and past them, at the start,
                             before and after training; the training log
One process writes a run folder at a time (longbert.training.start_or_resume); `--resume` continues from the last
checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate.utils import set_seed

from longbert.config import PretrainRecipe, load_pretrain_recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.modeling.backbone import attention_implementation, resolve_backbone
from longbert.result import Result
from longbert.strategies.base import EncodesTokens
from longbert.strategies.windows import usable_positions
from longbert.training.accelerator import start_accelerator
from longbert.training.checkpoint import LoopState, load_checkpoint, recipe_fingerprint, save_checkpoint
from longbert.training.optim import optimizer_step, param_groups, warmup_then_decay
from longbert.training.pretraining.heldout import HeldOut, bucket_labels, describe, heldout_loss
from longbert.training.pretraining.masking import TRAINING_MASKS, Masker, seeded
from longbert.training.pretraining.mlm import MaskedLanguageModel, build_model
from longbert.training.pretraining.unlabelled import batch_rows, load_documents
from longbert.training.start_or_resume import open_run
from longbert.training.stopping import StopRequest, finite_loss, interrupted
from longbert.training.train_log import close_log_window, speed
from longbert.utils.atomic import json_text, write_text_atomically
from longbert.utils.folders import (
    CHECKPOINT,
    METRICS_FILE,
    METRICS_PAGE,
    PRETRAINED_BACKBONE,
    RECIPE_FILE,
    TRANSFORMERS_CONFIG,
)
from longbert.utils.hardware import adamw, describe_machine, process_state
from longbert.utils.logs import main_process_logger
from longbert.utils.outputs import atomic_folder
from longbert.utils.progress import progress

log = main_process_logger(__name__)  # on the main process only

# Files and folders of a sentence-transformers model that describe its pooling (see backbone.backbone_token_pooling).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


@dataclass(frozen=True)
class PretrainResult(Result):
    """What `longbert.pretrain` returns: `folder`, the run folder; `metrics`, what its metrics.json holds; `model`, the
    trained backbone folder (<run folder>/backbone), usable as a training recipe's backbone.name."""


def pretrain(recipe: PretrainRecipe | str | Path, resume: bool = False, command: str | None = None,
             stop: StopRequest | None = None) -> PretrainResult:
    """Continue masked-language-model training of `recipe`'s backbone on its unlabelled documents, read through its
    strategy, into the run folder (recipe.output_dir); writes <run folder>/backbone, metrics.json and metrics.md.
    `recipe`: a PretrainRecipe, or a recipe file / packaged recipe name. With `resume`, continue the run from its last
    checkpoint (the recipe must be the same). `stop`: checked after every optimiser step; once set, a checkpoint is
    written and TrainingInterrupted raised (Ctrl-C and SIGTERM set it)."""
    if not isinstance(recipe, PretrainRecipe):
        recipe = load_pretrain_recipe(recipe)
    run_dir = Path(recipe.output_dir)
    stop = threading.Event() if stop is None else stop
    if process_state().num_processes > 1:
        raise LongbertError("longbert pretrain runs in one process (one GPU, or the CPU); start it without "
                            "accelerate launch / torchrun")
    with open_run(run_dir, recipe, resume, stop) as resuming:
        return _pretrain(recipe, run_dir, resuming, command, stop)


def _pretrain(recipe: PretrainRecipe, run_dir: Path, resume: bool, command: str | None,
              stop: StopRequest) -> PretrainResult:
    cfg = recipe.train
    accelerator, precision = start_accelerator(cfg.mixed_precision, cfg.gradient_accumulation)
    set_seed(recipe.seed)

    model, tokenizer, notes, untrained_head = build_model(recipe)
    for note in notes:
        log.info(note)
    learned = model.learned_positions
    data = load_documents(recipe.data, tokenizer, recipe.seed)
    log.info(data.summary())
    masker = Masker.from_tokenizer(tokenizer, recipe.masking)
    heldout = HeldOut.mask(data.heldout, masker, recipe.seed)
    write_text_atomically(run_dir / RECIPE_FILE, recipe_to_yaml(recipe))

    loop = _start_loop(recipe, model, accelerator, heldout, learned, run_dir, resume)
    _fit(loop, data, masker, stop)
    state, core = loop.state, loop.core

    backbone_dir = run_dir / PRETRAINED_BACKBONE
    save_backbone(core, tokenizer, recipe.backbone.name, backbone_dir)
    by_when = {entry["when"]: entry for entry in state.history}
    metrics = {
        "recipe": recipe.name,
        "strategy": recipe.strategy.name,
        "strategy_settings": dataclasses.asdict(recipe.strategy),
        "token_level_reading": isinstance(core.strategy, EncodesTokens),
        "backbone": recipe.backbone.name,
        "backbone_dir": str(backbone_dir),
        "mlm_head_started_untrained": untrained_head,
        "notes": notes,
        "command": command,
        "machine": describe_machine(),
        "mixed_precision": precision,
        "learned_positions": learned,
        "data": data.stats,
        "steps": state.global_step,
        "head_steps": cfg.head_steps,
        "train_seconds": state.train_seconds,  # the loop, held-out measurements included
        "heldout_seconds": sum(entry["seconds"] for entry in state.history),
        "heldout": {when: by_when[when] for when in ("start", "before", "after") if when in by_when},
        "heldout_history": state.history,
        "train_log": state.train_log,
    }
    write_text_atomically(run_dir / METRICS_FILE, json_text(metrics, run_dir / METRICS_FILE, indent=2))
    write_text_atomically(run_dir / METRICS_PAGE, metrics_markdown(metrics))
    return PretrainResult(folder=run_dir, metrics=metrics, model=backbone_dir)


def _start_loop(recipe: PretrainRecipe, model: MaskedLanguageModel, accelerator, heldout: HeldOut, learned: int,
                run_dir: Path, resume: bool) -> _Loop:
    """The optimiser and its schedule, prepared with the model; with `resume`, the checkpoint loaded over them."""
    cfg = recipe.train
    # One optimiser, one schedule per part: the head warms up from step 0; the backbone gets no gradient during
    # head_steps, then warms up and decays over the steps after them.
    optimizer = adamw(param_groups(model, cfg, is_backbone=model.is_backbone))
    backbone_steps = cfg.steps - cfg.head_steps
    factors = [(lambda s: 0.0 if s < cfg.head_steps else warmup_then_decay(s - cfg.head_steps, backbone_steps,
                                                                          cfg.warmup_ratio))
               if group["backbone"] else (lambda s: warmup_then_decay(s, cfg.steps, cfg.warmup_ratio))
               for group in optimizer.param_groups]
    # Not prepared: one process steps it once per optimiser step, the units its factors count in.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factors)
    model, optimizer = accelerator.prepare(model, optimizer)
    core = accelerator.unwrap_model(model)
    backbone_params = [p for n, p in core.named_parameters() if p.requires_grad and core.is_backbone(n)]
    fingerprint = recipe_fingerprint(recipe)

    state = LoopState()
    if resume:
        state, _ = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        log.info(f"resuming {run_dir} at step {state.global_step}")
    return _Loop(recipe, accelerator, run_dir, model, core, backbone_params, optimizer, scheduler, fingerprint, state,
                 heldout, learned)


def _fit(loop: _Loop, data, masker: Masker, stop: StopRequest) -> None:
    """The loop: optimiser steps up to train.steps (from a resumed run's step), then the held-out loss after training
    and the last checkpoint."""
    recipe, state, accelerator, model = loop.recipe, loop.state, loop.accelerator, loop.model
    cfg = recipe.train
    loop.started = time.perf_counter() - state.train_seconds
    if not state.history:  # a new run: the backbone as loaded, the head as loaded (untrained if none was shipped)
        loop.measure("start" if cfg.head_steps else "before")
    model.train()
    for _ in progress(range(state.global_step, cfg.steps), "pretraining"):
        head_only = state.global_step < cfg.head_steps
        # Forward and backward over `gradient_accumulation` batches, each masked by its own seeded generator;
        # accelerate sums their gradients, and the optimiser step (clip, step, schedule) acts after the last one.
        for micro in range(cfg.gradient_accumulation):
            inputs, targets = _masked_batch(data.train, masker, cfg.batch_size, recipe.seed,
                                            state.global_step * cfg.gradient_accumulation + micro)
            with accelerator.accumulate(model):
                losses, _ = model(list(inputs), list(targets), backbone_grad=not head_only)  # (M,)
                if losses.numel():
                    loss = losses.mean()
                    accelerator.backward(loss)
                    state.loss_sum += finite_loss(loss.item(), "pretraining", state.global_step + 1)
                    state.loss_batches += 1
                state.tokens += sum(len(ids) for ids in inputs)
                if head_only and accelerator.sync_gradients:
                    for p in loop.backbone_params:  # the tied decoder is the word embeddings: the backbone's, unchanged
                        p.grad = None
                optimizer_step(accelerator, model, loop.optimizer, loop.scheduler, cfg.max_grad_norm)
        state.global_step += 1
        state.train_seconds = time.perf_counter() - loop.started
        # Log every L steps; measure the held-out loss once the head has trained alone, and every N steps when asked;
        # checkpoint every M steps; stop cleanly on request.
        if state.global_step % cfg.log_every_steps == 0 or state.global_step == cfg.steps:
            loop.log_training()
        if state.global_step == cfg.head_steps:
            loop.measure("before")  # the backbone as loaded, with a trained head
        elif cfg.eval_every_steps and state.global_step % cfg.eval_every_steps == 0 and state.global_step < cfg.steps:
            loop.measure("during")
        if state.global_step % cfg.checkpoint_every_steps == 0 and state.global_step < cfg.steps:
            loop.checkpoint()
        if stop.is_set() and state.global_step < cfg.steps:
            loop.checkpoint()
            raise interrupted("pretraining", state.global_step, loop.run_dir / CHECKPOINT)
    loop.measure("after")
    loop.checkpoint()


def _masked_batch(documents: list, masker: Masker, batch_size: int, seed: int, index: int) -> tuple:
    """Batch `index` of the training documents, masked by its own seeded generator: (inputs, targets)."""
    rows = batch_rows(len(documents), batch_size, index, seed)
    generator = seeded(seed, TRAINING_MASKS, index)
    return tuple(zip(*(masker(torch.from_numpy(documents[r]).long(), generator) for r in rows)))


@dataclass
class _Loop:
    """What the steps of _fit's loop share: the prepared model, optimiser and scheduler, the loop state, and the
    held-out documents the loss is measured on."""

    recipe: PretrainRecipe
    accelerator: object
    run_dir: Path
    model: torch.nn.Module  # prepared
    core: MaskedLanguageModel  # the model unwrapped
    backbone_params: list  # the backbone's trainable parameters, which get no gradient during head_steps
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    fingerprint: str
    state: LoopState
    heldout: HeldOut
    learned: int  # positions the backbone had learned
    started: float = 0.0  # the loop's start (time.perf_counter), less the training time before a resume

    def measure(self, when: str) -> None:
        """The held-out loss now, recorded once per step in state.history."""
        state = self.state
        if any(entry["step"] == state.global_step for entry in state.history):
            return
        started_at = time.perf_counter()
        result = heldout_loss(self.model, self.heldout, self.recipe.eval.batch_size, self.learned,
                              f"held-out loss ({when})")
        seconds = time.perf_counter() - started_at
        state.history.append({"step": state.global_step, "when": when, **result, "seconds": seconds})
        state.logged_seconds += seconds  # tokens/s counts training time only
        log.info(f"step {state.global_step}: held-out MLM loss {describe(result, self.learned)} ({when})")

    def log_training(self) -> None:
        entry = close_log_window(self.state, self.accelerator, self.scheduler, self.started)
        log.info(f"step {self.state.global_step}: train MLM loss {entry['loss']:.4f}, learning rate "
                 f"{entry['learning_rate']:.2e} (head {entry['head_learning_rate']:.2e}){speed(entry)}")

    def checkpoint(self) -> None:
        save_checkpoint(self.run_dir / CHECKPOINT, self.core, self.optimizer, self.scheduler, self.state,
                        self.fingerprint, None, self.accelerator.num_processes)


# --------------------------------------------------------------------------------------------------------------
# The written backbone and the report


def save_backbone(model: MaskedLanguageModel, tokenizer, backbone_name: str, folder: Path) -> None:
    """Write the trained *ForMaskedLM (encoder and head, safetensors) and the tokenizer into `folder`, whole or not
    at all. The attention a strategy installed is not saved: the folder loads as the plain architecture (a strategy
    installs its own again). A sentence-transformers description of the original's pooling is copied along."""
    mlm = model.mlm
    installed = mlm.config._attn_implementation
    default = attention_implementation(type(mlm))
    # config.json: what every transformers model folder holds; a folder without it is not an earlier backbone
    with atomic_folder(folder, TRANSFORMERS_CONFIG, "backbone folder") as staging:
        mlm.config._attn_implementation = default  # only what transformers itself knows goes into config.json
        try:
            mlm.save_pretrained(staging)
        finally:
            mlm.config._attn_implementation = installed
        limit = tokenizer.model_max_length
        tokenizer.model_max_length = usable_positions(model.backbone)  # what one pass of this encoder positions
        try:
            tokenizer.save_pretrained(staging)
        finally:
            tokenizer.model_max_length = limit
        source = Path(resolve_backbone(backbone_name))
        if source.is_dir() and (source / "modules.json").is_file():
            for name in SENTENCE_TRANSFORMERS_FILES:
                if (source / name).is_file():
                    shutil.copy(source / name, staging / name)
            for module in json.loads((source / "modules.json").read_text()):
                path = module.get("path", "") if isinstance(module, dict) else ""
                if path and (source / path).is_dir():
                    shutil.copytree(source / path, staging / path)


def metrics_markdown(metrics: dict) -> str:
    heldout = metrics["heldout"]
    columns = [(when, label) for when, label in (
        ("start", "start (head as loaded)"), ("before", "before (backbone as loaded)"), ("after", "after"))
        if when in heldout]
    lines = [f"# {metrics['recipe']}: continued MLM pretraining", "",
             f"Strategy `{metrics['strategy']}` ("
             + ("its own token-level reading" if metrics["token_level_reading"] else "plain consecutive windows")
             + f"), backbone `{metrics['backbone']}`, {metrics['steps']} steps ({metrics['head_steps']} of them the "
               f"MLM head alone), {metrics['train_seconds'] / 60:.1f} min ({metrics['heldout_seconds'] / 60:.1f} of "
               f"them measuring the held-out loss), precision "
               f"{metrics['mixed_precision']}. The trained backbone: `{metrics['backbone_dir']}`.", ""]
    for note in metrics["notes"]:
        lines += [f"- {note}"]
    lines += ["", "Held-out MLM loss (perplexity) by document position ([CLS] at 0):", "",
              "| targets | " + " | ".join(label for _, label in columns) + " |",
              "|---|" + "---|" * len(columns)]
    for key, label in (("all", "all"), *bucket_labels(metrics["learned_positions"]).items()):
        count = heldout[columns[-1][0]][key]["targets"]
        cells = []
        for when, _ in columns:
            entry = heldout[when][key]
            cells.append("–" if entry["loss"] is None else f"{entry['loss']:.3f} ({entry['perplexity']:.1f})")
        lines.append(f"| {label} ({count:,}) | " + " | ".join(cells) + " |")
    d = metrics["data"]
    lines += ["", f"Data: {d['train']['documents']:,} training and {d['heldout']['documents']:,} held-out documents "
                  f"of split `{d['split']}` ({d['heldout']['over_512']:,} held-out over 512 tokens).", ""]
    return "\n".join(lines)
