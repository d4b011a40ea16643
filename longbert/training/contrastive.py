"""`train.contrastive_pairs`: SetFit-style contrastive tuning of the sentence encoder before the head (Tunstall et
al. 2022, "Efficient Few-Shot Learning Without Prompts"), as the first stage of a run.

Pairs of training documents are drawn, each document with partners of its own class and of another; each side of a
pair is a window of `contrastive_window` tokens at a random place in its document, and the backbone learns to give
the two windows' vectors (its own token pooling: the mean of token states for a sentence-transformers model) a
cosine of 1 when the classes agree and 0 when they differ (mean squared error, SetFit's CosineSimilarityLoss). With
100 labelled documents that is thousands of examples where the head alone sees 100. The tuned model is written to
run_dir/contrastive_stage; the rest of the run (a head over the frozen, tuned backbone as SetFit does with
`model.finetune: frozen`, or the head stage and end-to-end fine-tuning) starts from it through `train.init_from`.

    summary, source = train_contrastive_stage(recipe, run_dir, source, stop, corpus, (backbone, tokenizer))

A stage that finished is read back, not trained again (a resumed run); one that was stopped keeps nothing, and the
run starts again whole (the stage takes minutes). It runs on the main process; the others wait for its folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import set_seed

from longbert.modeling.backbone import backbone_token_pooling
from longbert.strategies.base import SpecialTokens
from longbert.strategies.pooling import pool_tokens
from longbert.training.accelerator import start_accelerator
from longbert.training.init_from import build_model, open_init_from
from longbert.training.optim import optimizer_step, warmup_then_decay
from longbert.training.stopping import TrainingInterrupted, finite_loss
from longbert.utils.atomic import json_text, write_text_atomically
from longbert.utils.folders import CONTRASTIVE_STAGE, CONTRASTIVE_SUMMARY
from longbert.utils.hardware import adamw
from longbert.utils.logs import get_logger
from longbert.utils.progress import progress


def draw_pairs(labels: list, per_document: int, max_pairs: int, seed: int) -> list[tuple[int, int, float]]:
    """(i, j, target) pairs of training documents: each document in turn takes `per_document` partners, alternately
    one of its own class (target 1.0) and one of another class (target 0.0), drawn at random (SetFit's pair
    generation); shuffled, then cut to `max_pairs`. Two labels agree when they are equal (a multi-label document's
    whole label set). A document without a partner of a kind (its class alone, or one class only) skips that kind."""
    rng = np.random.default_rng(seed)
    keys = [tuple(np.asarray(label).ravel().tolist()) for label in labels]
    by_class: dict = {}
    for index, key in enumerate(keys):
        by_class.setdefault(key, []).append(index)
    others = {key: [j for other, members in by_class.items() if other != key for j in members] for key in by_class}
    pairs = []
    for _ in range(math.ceil(per_document / 2)):
        for i, key in enumerate(keys):
            same = by_class[key]
            if len(same) > 1:
                partner = i
                while partner == i:
                    partner = same[int(rng.integers(len(same)))]
                pairs.append((i, partner, 1.0))
            if others[key]:
                pairs.append((i, others[key][int(rng.integers(len(others[key])))], 0.0))
    order = rng.permutation(len(pairs))[:max_pairs]
    return [pairs[k] for k in order]


def window_batch(documents: list, starts: list[int], window: int, special) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows (document[start : start + window], framed by [CLS] and [SEP]) as (input_ids, attention_mask),
    each (B, L), padded to the longest."""
    rows = [[special.cls_id, *doc[start : start + window].tolist(), special.sep_id]
            for doc, start in zip(documents, starts)]
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), special.pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(row)
        mask[b, : len(row)] = 1
    return ids, mask


def pair_loss(backbone, first: tuple, second: tuple, targets: torch.Tensor, token_pooling: str) -> torch.Tensor:
    """SetFit's CosineSimilarityLoss: the mean squared error between the cosine of the two sides' vectors and the
    targets (1.0 same class, 0.0 another)."""
    vectors = []
    for ids, mask in (first, second):
        hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
        vectors.append(pool_tokens(hidden, mask, token_pooling).float())  # (B, H)
    cosine = torch.nn.functional.cosine_similarity(vectors[0], vectors[1], dim=-1)  # (B,)
    return torch.nn.functional.mse_loss(cosine, targets)


def stage_recipe(recipe, run_dir: Path):
    """The recipe whose model the stage tunes: the run's, with the backbone trained whole (so the folder it writes
    holds the tuned weights), no stage of its own, written to run_dir/contrastive_stage."""
    return dataclasses.replace(recipe, output_dir=str(run_dir / CONTRASTIVE_STAGE),
                               model=dataclasses.replace(recipe.model, finetune="full"),
                               train=dataclasses.replace(recipe.train, contrastive_pairs=0, head_first=False))


def train_contrastive_stage(recipe, run_dir: Path, source, stop, corpus, loaded: tuple):
    """Run the stage (or read it where a resumed run finished it). Returns what the run records of it ({pairs,
    steps, train_seconds, first_loss, last_loss}) and the InitSource the rest of the run starts from: the tuned
    model. `source`: what train.init_from names, if anything (the stage starts from it). `corpus`: the run's
    documents (the stage pairs its training documents); `loaded`: the backbone it tunes and its tokenizer."""
    stage = stage_recipe(recipe, run_dir)
    folder = Path(stage.output_dir)
    log = get_logger(__name__)
    accelerator, _ = start_accelerator(recipe.train.mixed_precision, 1)
    if not (folder / CONTRASTIVE_SUMMARY).is_file() and accelerator.is_main_process:
        log.info(f"train.contrastive_pairs: tuning the backbone on pairs of training documents first, in {folder}")
        set_seed(recipe.seed)
        summary = _tune(stage, recipe.train, source, accelerator, stop, corpus, loaded)
        if summary is None:
            raise TrainingInterrupted("the contrastive stage stopped on request; nothing of it was kept: start "
                                      "the run again (it takes minutes)")
    accelerator.wait_for_everyone()
    summary = json.loads((folder / CONTRASTIVE_SUMMARY).read_text())
    started = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, init_from=str(folder)))
    return summary, dataclasses.replace(open_init_from(started), head_trained=False)  # its head never trained


def _tune(stage, cfg, source, accelerator, stop, corpus, loaded: tuple) -> dict | None:
    """The stage's loop, top to bottom; writes the tuned model and its summary. None when `stop` was set."""
    model, _ = build_model(stage, corpus.label_names, loaded, source)
    backbone = model.backbone.to(accelerator.device)
    pooling = getattr(model.settings.strategy, "token_pooling", None) or backbone_token_pooling(backbone)[0]
    special = SpecialTokens.from_tokenizer(model.tokenizer)
    train = corpus.splits["train"]
    documents = [np.asarray(ids) for ids in train["input_ids"]]
    labels = [np.asarray(label) for label in train["labels"]]
    pairs = draw_pairs(labels, cfg.contrastive_pairs, cfg.contrastive_max_pairs, stage.seed)
    steps = math.ceil(len(pairs) / cfg.batch_size)
    optimizer = adamw([{"params": [p for p in backbone.parameters() if p.requires_grad], "lr":
                        cfg.contrastive_learning_rate, "weight_decay": cfg.weight_decay}])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_then_decay(s, steps, cfg.warmup_ratio))
    rng = np.random.default_rng(stage.seed + 1)  # where each side's window starts
    losses = []
    backbone.train()
    started = time.perf_counter()
    for step in progress(range(steps), "contrastive pairs"):
        batch = pairs[step * cfg.batch_size : (step + 1) * cfg.batch_size]
        sides = [_side(batch, side, documents, rng, cfg.contrastive_window, special, accelerator.device)
                 for side in (0, 1)]
        targets = torch.tensor([pair[2] for pair in batch], device=accelerator.device)
        with accelerator.autocast():
            loss = pair_loss(backbone, sides[0], sides[1], targets, pooling)  # forward
        loss.backward()  # backward
        optimizer_step(accelerator, backbone, optimizer, scheduler, cfg.max_grad_norm)  # clip, step, schedule
        losses.append(finite_loss(loss.item(), "the contrastive stage", step + 1))
        if (step + 1) % cfg.log_every_steps == 0:
            get_logger(__name__).info(f"contrastive step {step + 1}/{steps}: loss "
                                      f"{np.mean(losses[-cfg.log_every_steps:]):.4f}")
        if stop.is_set():
            return None
    seconds = time.perf_counter() - started
    backbone.eval()
    model.to("cpu").save_pretrained(stage.output_dir)
    window = min(len(losses), cfg.log_every_steps)
    summary = {"pairs": len(pairs), "steps": steps, "train_seconds": seconds,
               "first_loss": float(np.mean(losses[:window])), "last_loss": float(np.mean(losses[-window:]))}
    path = Path(stage.output_dir) / CONTRASTIVE_SUMMARY
    write_text_atomically(path, json_text(summary, path, indent=2))
    return summary


def _side(batch: list, side: int, documents: list, rng, window: int, special, device) -> tuple:
    """One side of a batch of pairs: each pair's document on that side, a window of it at a random place, on
    `device` as (input_ids, attention_mask)."""
    docs = [documents[pair[side]] for pair in batch]
    starts = [int(rng.integers(0, max(1, len(d) - window + 1))) for d in docs]
    ids, mask = window_batch(docs, starts, window, special)
    return ids.to(device), mask.to(device)
