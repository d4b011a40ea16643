"""Continued pretraining (`longbert pretrain RECIPE`): masked-language-model training on unlabelled long text, read
the way a strategy reads a document.

BERT learnt its weights by predicting hidden tokens of texts of at most 512 tokens (Devlin et al. 2019). A strategy
that reads further shows the backbone something it has never seen: bigbird's positions past 512 start as copies or
interpolations and its attention is block-sparse; recurrence's segments also attend to a memory of the previous
one. Continuing the same objective on unlabelled documents, read through the strategy's own attention (its
`encode_tokens` hook), lets the backbone adapt before a single label is used: the semi-supervised step of BERT at
document length (Longformer did it for RoBERTa: MLM bits-per-character 1.957 with copied positions, 1.753 after 2K
steps of continued pretraining). A strategy without the hook (truncate, chunk, sliding, rmt) is pretrained on plain
consecutive windows of the backbone's positions: the baseline of an ordinary BERT reading the same text.

What trains: the backbone and the MLM head. The strategy's own weights (recurrence's distance bias, poolers) stay as
they were built, so that a fine-tuning run that starts from the written backbone builds the strategy the backbone
was adapted to.

The MLM head. A backbone that ships without one (minilm: sentence-transformers keep only the BertModel) gets a
randomly initialised transform and bias, its decoder tied to the word embeddings; its loss says nothing about the
backbone. `train.head_steps` then trains the head alone first (the backbone gets no gradient and is unchanged):
the held-out loss after them is the backbone's honest "before", the one at step 0 is reported as "start".

Masking (BERT's): `masking.probability` of the non-special tokens of each document are targets; of those,
`mask_fraction` become [MASK], `random_fraction` a random non-special token, the rest stay. The masks of training
batch k depend on (seed, k) only, those of held-out document d on (seed, d) only: a resumed run masks as an
uninterrupted one, and every held-out measurement predicts the same tokens.

A run folder holds:
    recipe.yaml              the resolved pretraining recipe (what ran)
    checkpoint/              the last resumable state (longbert.training.checkpoint): weights of the backbone and the head,
                             optimiser, scheduler, random states, the held-out measurements so far
    backbone/                the trained encoder with its MLM head and tokenizer (positions extended for bigbird):
                             a transformers model folder, loadable by AutoModel.from_pretrained and usable as a
                             training recipe's backbone.name (a sentence-transformers pooling config is copied along,
                             so `token_pooling: auto` reads it as it read the original)
    metrics.json, metrics.md held-out MLM loss and perplexity, overall and by document position ([CLS] at 0): within
                             the positions the backbone had learned (0-511 for BERT) and past them, at the start,
                             before and after training; the training log
One process writes a run folder at a time (longbert.training.runs); `--resume` continues from the last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from longbert.training.checkpoint import LoopState, load_checkpoint, recipe_fingerprint, save_checkpoint
from longbert.config import PretrainRecipe, load_pretrain_recipe, recipe_to_yaml
from longbert.errors import LongbertError
from longbert.utils.hardware import adamw, describe_machine, process_state, resolve_precision
from longbert.utils.progress import progress
from longbert.training.runs import CHECKPOINT, RECIPE, locked, prepare
from longbert.training.finetune import StopRequest, TrainingInterrupted, stop_on_signals

BACKBONE = "backbone"  # the run folder's trained encoder
BUCKETS = ("within_learned", "beyond_learned")  # document positions the backbone had learned (0-511), and after them
IGNORE = -100  # target of a token that is not predicted
# The modules of each architecture's *ForMaskedLM that turn hidden states into vocabulary logits, in order.
MLM_HEADS = {
    "bert": ("cls",),
    "roberta": ("lm_head",),
    "xlm-roberta": ("lm_head",),
    "electra": ("generator_predictions", "generator_lm_head"),
    "albert": ("predictions",),
}
# Files and folders of a sentence-transformers model that describe its pooling (see backbone.backbone_token_pooling).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")


@dataclass
class PretrainResult:
    run_dir: Path
    backbone_dir: Path  # the trained encoder: usable as a training recipe's backbone.name
    metrics: dict  # what metrics.json holds


# --------------------------------------------------------------------------------------------------------------
# Masking


class Masker:
    """BERT's masking of one document's content ids, from the tokenizer's special tokens and `masking` settings."""

    def __init__(self, masking, mask_id: int, special_ids: list[int], vocab_size: int):
        self.masking, self.mask_id = masking, mask_id
        self.special = torch.tensor(sorted(set(special_ids)), dtype=torch.long)
        candidates = torch.ones(vocab_size, dtype=torch.bool)
        candidates[self.special[self.special < vocab_size]] = False
        self.candidates = candidates.nonzero().flatten()  # (V',) ids a random replacement is drawn from

    @classmethod
    def from_tokenizer(cls, tokenizer, masking) -> "Masker":
        if tokenizer.mask_token_id is None:
            raise LongbertError("the tokenizer has no [MASK] token; masked-language-model training needs one")
        return cls(masking, tokenizer.mask_token_id, tokenizer.all_special_ids, len(tokenizer))

    def __call__(self, ids: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (T,) -> (inputs (T,) with the chosen tokens hidden, targets (T,): the original id where chosen,
        IGNORE elsewhere). Special tokens are never chosen."""
        m = self.masking
        chosen = (torch.rand(ids.shape, generator=generator) < m.probability) & ~torch.isin(ids, self.special)
        draw = torch.rand(ids.shape, generator=generator)  # which of the three fates a chosen token meets
        to_mask = chosen & (draw < m.mask_fraction)
        to_random = chosen & (draw >= m.mask_fraction) & (draw < m.mask_fraction + m.random_fraction)
        random_ids = self.candidates[torch.randint(len(self.candidates), ids.shape, generator=generator)]
        inputs = torch.where(to_mask, torch.full_like(ids, self.mask_id), ids)
        inputs = torch.where(to_random, random_ids, inputs)
        return inputs, torch.where(chosen, ids, torch.full_like(ids, IGNORE))


def seeded(*key: int) -> torch.Generator:
    """A generator whose stream depends on `key` only (seed, purpose, index)."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence(list(key)).generate_state(1)[0]))


TRAINING_MASKS, HELDOUT_MASKS = 1, 2  # the purposes in `seeded` keys


# --------------------------------------------------------------------------------------------------------------
# Documents


@dataclass
class PretrainData:
    train: list[np.ndarray]  # content ids per document (int32)
    heldout: list[np.ndarray]
    stats: dict

    def summary(self) -> str:
        s = self.stats
        parts = [f"{s[role]['documents']} {role} documents ({s[role]['over_512']} over 512 tokens, median "
                 f"{s[role]['median_tokens']})" for role in ("train", "heldout")]
        dropped = [f"{n} {why}" for why, n in (("empty", s["skipped_empty"]),
                                               (f"shorter than data.min_tokens", s["shorter_than_min_tokens"])) if n]
        return f"data: {', '.join(parts)} from split {s['split']!r}" + (f"; left out: {', '.join(dropped)}" if dropped else "")


def load_documents(data, tokenizer, seed: int) -> PretrainData:
    """The unlabelled documents a recipe's data section names, tokenized (capped at data.max_document_tokens), those
    shorter than data.min_tokens left out, split (seeded) into training and held-out documents and subsampled."""
    from longbert.data.documents import tokenize_documents
    from longbert.data.sources import load_raw_splits

    raw, _ = load_raw_splits(data, [data.split])
    table = raw[data.split]
    if data.text_column not in table.column_names:
        raise LongbertError(f"data.text_column {data.text_column!r} not found in split {data.split!r}; "
                            f"columns: {', '.join(table.column_names)}")
    texts = list(table[data.text_column])
    for row, text in enumerate(texts):
        if not isinstance(text, str):
            raise LongbertError(f"data: row {row} of split {data.split!r}: text is {type(text).__name__}, not a string")
    kept_texts = [t for t in texts if t.strip()]
    ids, lengths = [], []
    for start in range(0, len(kept_texts), 2000):  # in slices, kept as int32 arrays: bounded memory
        part_ids, part_lengths = tokenize_documents(tokenizer, kept_texts[start : start + 2000], data.max_document_tokens)
        ids += [np.asarray(d, dtype=np.int32) for d in part_ids]
        lengths += part_lengths
    long_enough = [i for i, n in enumerate(lengths) if n >= data.min_tokens]
    if len(long_enough) < 2:
        raise LongbertError(f"data: {len(long_enough)} document(s) of split {data.split!r} have at least "
                            f"data.min_tokens={data.min_tokens} tokens; training and held-out need 2 at least")
    rng = np.random.default_rng(seed)
    order = rng.permutation(long_enough)
    n_heldout = min(max(1, round(data.heldout_fraction * len(order))), len(order) - 1)
    roles = {"heldout": order[:n_heldout], "train": order[n_heldout:]}
    limits = {"heldout": data.max_heldout_documents, "train": data.max_train_documents}
    stats = {"split": data.split, "skipped_empty": len(texts) - len(kept_texts),
             "shorter_than_min_tokens": len(lengths) - len(long_enough)}
    chosen = {}
    for role, rows in roles.items():
        if limits[role] is not None and limits[role] < len(rows):
            rows = rng.choice(rows, limits[role], replace=False)
        rows = np.sort(rows)
        chosen[role] = [ids[i] for i in rows]
        full = [lengths[i] for i in rows]
        stats[role] = {"documents": len(rows), "median_tokens": int(np.median(full)),
                       "over_512": sum(n > 512 for n in full),
                       "cut_by_token_cap": sum(n - 2 > data.max_document_tokens for n in full)}
    return PretrainData(chosen["train"], chosen["heldout"], stats)


def batch_rows(n_documents: int, batch_size: int, index: int, seed: int) -> list[int]:
    """The documents of training batch `index`: the batches walk through one seeded permutation of the documents
    per epoch, one after another, so batch `index` depends on the seed and the index only."""
    rows = []
    for position in range(index * batch_size, (index + 1) * batch_size):
        epoch, offset = divmod(position, n_documents)
        rows.append(int(torch.randperm(n_documents, generator=seeded(seed, 0, epoch))[offset]))
    return rows


# --------------------------------------------------------------------------------------------------------------
# The model: the backbone's *ForMaskedLM, read through the strategy


class MaskedLanguageModel(nn.Module):
    """A transformers *ForMaskedLM whose encoder reads documents through a strategy: `forward(inputs, targets)` ->
    (per-target losses (M,), their document positions (M,))."""

    def __init__(self, mlm: nn.Module, strategy: nn.Module, head_modules: tuple[str, ...], special, budget,
                 learned_positions: int):
        super().__init__()
        self.mlm, self.strategy, self.head_modules = mlm, strategy, head_modules
        self.learned_positions = learned_positions  # positions the backbone had before the strategy extended them
        self.special, self.budget = special, budget  # for the plain windows of a strategy without encode_tokens
        strategy.requires_grad_(False)  # the strategy as built; only the backbone and the head train

    @property
    def backbone(self) -> nn.Module:
        return self.mlm.base_model

    def is_backbone(self, name: str) -> bool:
        """Whether parameter `name` (of this module) is the encoder's."""
        return name.startswith(f"mlm.{self.mlm.base_model_prefix}.")

    def token_states(self, documents: list[torch.Tensor]) -> list[torch.Tensor]:
        """Content token ids per document -> the hidden states of the tokens the strategy reads, (T', H) each."""
        hook = getattr(self.strategy, "encode_tokens", None)
        if callable(hook):
            return hook(self.backbone, documents)
        from longbert.strategies.windows import encode_tokens_in_windows, usable_positions

        return encode_tokens_in_windows(self.backbone, documents, usable_positions(self.backbone) - 2, self.special,
                                        self.budget)

    def forward(self, inputs: list[torch.Tensor], targets: list[torch.Tensor], backbone_grad: bool = True):
        """inputs, targets: (T,) each (see Masker). `backbone_grad` False: the backbone runs without a graph (the
        head trains alone). Returns the cross-entropy of every target the strategy reads (M,) and its document
        position (M,), [CLS] at 0."""
        device = next(self.parameters()).device
        with torch.set_grad_enabled(torch.is_grad_enabled() and backbone_grad):
            states = self.token_states([ids.to(device) for ids in inputs])  # B x (T', H)
        picked, labels, positions = [], [], []
        for state, target in zip(states, targets):
            target = target[: state.shape[0]].to(device)  # (T',): tokens past what the strategy reads are not read
            where = (target != IGNORE).nonzero().flatten()  # (m,)
            picked.append(state[where])  # (m, H)
            labels.append(target[where])
            positions.append(where + 1)
        hidden = torch.cat(picked)  # (M, H)
        for name in self.head_modules:
            hidden = getattr(self.mlm, name)(hidden)  # ... -> (M, V)
        losses = nn.functional.cross_entropy(hidden.float(), torch.cat(labels), reduction="none")  # (M,)
        return losses, torch.cat(positions)


def load_masked_lm(name: str, attention_dropout: float | None, hidden_dropout: float | None):
    """(the backbone's *ForMaskedLM, its head modules, the names of head weights the backbone did not ship)."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from longbert.modeling.backbone import attention_implementation, clear_load_errors, quiet_transformers, resolve_backbone

    quiet_transformers()
    reference = resolve_backbone(name)
    with clear_load_errors(name, reference):
        config = AutoConfig.from_pretrained(reference, trust_remote_code=False)
        if config.model_type not in MLM_HEADS:
            raise LongbertError(f"longbert pretrain knows the masked-language-model head of "
                                f"{', '.join(MLM_HEADS)}; backbone {name!r} is a {config.model_type!r}")
        if attention_dropout is not None:
            config.attention_probs_dropout_prob = attention_dropout
        if hidden_dropout is not None:
            config.hidden_dropout_prob = hidden_dropout
        model_class = AutoModelForMaskedLM._model_mapping[type(config)]
        mlm, info = AutoModelForMaskedLM.from_pretrained(reference, config=config, trust_remote_code=False,
                                                         attn_implementation=attention_implementation(model_class),
                                                         output_loading_info=True)
    prefix = f"{mlm.base_model_prefix}."
    missing = sorted(k for k in info["missing_keys"] if not k.startswith(prefix))
    return mlm, MLM_HEADS[config.model_type], missing


def build_model(recipe: PretrainRecipe) -> tuple[MaskedLanguageModel, object, list[str], bool]:
    """(the model, the tokenizer, notes for the user, whether the MLM head started untrained)."""
    from longbert.modeling.backbone import load_tokenizer
    from longbert.strategies.base import SpecialTokens, build_strategy
    from longbert.strategies.windows import usable_positions

    mlm, head_modules, missing = load_masked_lm(recipe.backbone.name, recipe.backbone.attention_dropout,
                                                recipe.backbone.hidden_dropout)
    tokenizer = load_tokenizer(recipe.backbone.name)
    if recipe.backbone.gradient_checkpointing:
        mlm.gradient_checkpointing_enable()
    special = SpecialTokens.from_tokenizer(tokenizer)
    strategy = build_strategy(recipe.strategy, mlm.config.hidden_size, special, recipe.backbone.budget)
    learned_positions = usable_positions(mlm.base_model)
    strategy.adapt_backbone(mlm.base_model)
    notes = []
    if missing:
        notes.append(f"the MLM head started untrained: backbone {recipe.backbone.name!r} does not ship "
                     f"{', '.join(missing)}; its held-out loss at the start measures the random head, "
                     + (f"the one after train.head_steps={recipe.train.head_steps} (head alone) the backbone"
                        if recipe.train.head_steps else "and train.head_steps=0 gives it no steps of its own"))
    if not callable(getattr(strategy, "encode_tokens", None)):
        notes.append(f"strategy {recipe.strategy.name} has no token-level reading (encode_tokens): pretraining "
                     f"reads plain consecutive windows of the backbone's positions")
    model = MaskedLanguageModel(mlm, strategy, head_modules, special, recipe.backbone.budget, learned_positions)
    return model, tokenizer, notes, bool(missing)


# --------------------------------------------------------------------------------------------------------------
# Held-out loss


@dataclass
class HeldOut:
    """The held-out documents, masked once (seeded per document)."""

    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]

    @classmethod
    def mask(cls, documents: list[np.ndarray], masker: Masker, seed: int) -> "HeldOut":
        pairs = [masker(torch.from_numpy(d).long(), seeded(seed, HELDOUT_MASKS, i)) for i, d in enumerate(documents)]
        return cls([p[0] for p in pairs], [p[1] for p in pairs])


@torch.no_grad()
def heldout_loss(model, heldout: HeldOut, batch_size: int, learned_positions: int, description: str) -> dict:
    """The mean MLM loss and perplexity over every held-out target the strategy reads, overall and by document
    position: within_learned (below `learned_positions`, [CLS] at 0) and beyond_learned; with the number of targets
    each."""
    was_training = model.training
    model.eval()
    sums = {"all": [0.0, 0], "within_learned": [0.0, 0], "beyond_learned": [0.0, 0]}
    order = sorted(range(len(heldout.inputs)), key=lambda i: -len(heldout.inputs[i]))  # batches of similar lengths
    try:
        for start in progress(range(0, len(order), batch_size), description):
            rows = order[start : start + batch_size]
            losses, positions = model([heldout.inputs[i] for i in rows], [heldout.targets[i] for i in rows])
            losses, far = losses.double().cpu(), positions.cpu() >= learned_positions
            for key, chosen in (("all", slice(None)), ("within_learned", ~far), ("beyond_learned", far)):
                sums[key][0] += float(losses[chosen].sum())
                sums[key][1] += int(losses[chosen].numel())
    finally:
        model.train(was_training)
    out = {}
    for key, (total, count) in sums.items():
        loss = total / count if count else None
        out[key] = {"loss": loss, "perplexity": None if loss is None else math.exp(min(loss, 700.0)), "targets": count}
    return out


# --------------------------------------------------------------------------------------------------------------
# Training


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
    if resume and not run_dir.is_dir():
        raise LongbertError(f"--resume: {run_dir} has no checkpoint to continue from (the folder does not exist)")
    if process_state().num_processes > 1:
        raise LongbertError("longbert pretrain runs in one process (one GPU, or the CPU); start it without "
                            "accelerate launch / torchrun")
    with locked(run_dir), stop_on_signals(stop):
        return _pretrain(recipe, run_dir, prepare(run_dir, recipe, resume), command, stop)


def param_groups(model: MaskedLanguageModel, cfg) -> list[dict]:
    """AdamW groups: backbone weights (decayed), backbone biases/LayerNorm (not decayed), head weights (decayed),
    head biases/LayerNorm (not decayed). Each group records whether it is the backbone's (`backbone`)."""
    groups = {(True, True): [], (True, False): [], (False, True): [], (False, False): []}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups[(model.is_backbone(name), p.ndim >= 2)].append(p)
    out = []
    for (backbone, decayed), params in groups.items():
        if params:
            out.append({"params": params, "lr": cfg.learning_rate if backbone else cfg.head_learning_rate,
                        "weight_decay": cfg.weight_decay if decayed else 0.0, "backbone": backbone})
    return out


def warmup_then_decay(step: int, total: int, warmup_ratio: float) -> float:
    """The learning rate's factor at `step` of `total`: linear warmup over warmup_ratio * total steps, then linear
    decay to 0 (transformers' get_linear_schedule_with_warmup)."""
    warmup = int(warmup_ratio * total)
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def _pretrain(recipe: PretrainRecipe, run_dir: Path, resume: bool, command: str | None,
              stop: StopRequest) -> PretrainResult:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import set_seed

    from longbert.utils.atomic import write_text_atomically

    cfg = recipe.train
    precision = resolve_precision(cfg.mixed_precision, "cuda" if torch.cuda.is_available() else "cpu")
    AcceleratorState._reset_state(reset_partial_state=False)  # a second run in this process may differ (training.py)
    GradientState._reset_state()
    accelerator = Accelerator(mixed_precision=precision)
    set_seed(recipe.seed)

    model, tokenizer, notes, untrained_head = build_model(recipe)
    for note in notes:
        accelerator.print(note)
    learned = model.learned_positions
    data = load_documents(recipe.data, tokenizer, recipe.seed)
    accelerator.print(data.summary())
    masker = Masker.from_tokenizer(tokenizer, recipe.masking)
    heldout = HeldOut.mask(data.heldout, masker, recipe.seed)
    write_text_atomically(run_dir / RECIPE, recipe_to_yaml(recipe))

    # One optimiser, one schedule per part: the head warms up from step 0; the backbone gets no gradient during
    # head_steps, then warms up and decays over the steps after them.
    optimizer = adamw(param_groups(model, cfg))
    backbone_steps = cfg.steps - cfg.head_steps
    factors = [(lambda s: 0.0 if s < cfg.head_steps else warmup_then_decay(s - cfg.head_steps, backbone_steps,
                                                                          cfg.warmup_ratio))
               if group["backbone"] else (lambda s: warmup_then_decay(s, cfg.steps, cfg.warmup_ratio))
               for group in optimizer.param_groups]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factors)
    model, optimizer = accelerator.prepare(model, optimizer)
    core = accelerator.unwrap_model(model)
    backbone_params = [p for n, p in core.named_parameters() if p.requires_grad and core.is_backbone(n)]
    fingerprint = recipe_fingerprint(recipe)

    state = LoopState()
    if resume:
        state, _ = load_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, fingerprint)
        accelerator.print(f"resuming {run_dir} at step {state.global_step}")

    def measure(when: str) -> None:
        """The held-out loss now, recorded once per step in state.history."""
        if any(entry["step"] == state.global_step for entry in state.history):
            return
        started_at = time.perf_counter()
        result = heldout_loss(model, heldout, recipe.eval.batch_size, learned, f"held-out loss ({when})")
        seconds = time.perf_counter() - started_at
        state.history.append({"step": state.global_step, "when": when, **result, "seconds": seconds})
        state.logged_seconds += seconds  # tokens/s counts training time only
        accelerator.print(f"step {state.global_step}: held-out MLM loss {describe(result, learned)} ({when})")

    def log_training() -> None:
        state.train_seconds = time.perf_counter() - started
        seconds = state.train_seconds - state.logged_seconds
        entry = {"step": state.global_step, "loss": state.loss_sum / max(state.loss_batches, 1),
                 "learning_rate": scheduler.get_last_lr()[0], "head_learning_rate": scheduler.get_last_lr()[-1],
                 "tokens_per_second": state.tokens / seconds if seconds > 0 else None}
        state.train_log.append(entry)
        state.loss_sum, state.loss_batches, state.tokens = 0.0, 0, 0
        state.logged_seconds = state.train_seconds
        speed = "" if entry["tokens_per_second"] is None else f", {entry['tokens_per_second']:.0f} tokens/s"
        accelerator.print(f"step {state.global_step}: train MLM loss {entry['loss']:.4f}, learning rate "
                          f"{entry['learning_rate']:.2e} (head {entry['head_learning_rate']:.2e}){speed}")

    def checkpoint() -> None:
        save_checkpoint(run_dir / CHECKPOINT, core, optimizer, scheduler, state, fingerprint, None)

    started = time.perf_counter() - state.train_seconds
    if not state.history:  # a new run: the backbone as loaded, the head as loaded (untrained if none was shipped)
        measure("start" if cfg.head_steps else "before")
    model.train()
    for _ in progress(range(state.global_step, cfg.steps), "pretraining"):
        head_only = state.global_step < cfg.head_steps
        # Forward and backward over `gradient_accumulation` batches, each masked by its own seeded generator.
        for micro in range(cfg.gradient_accumulation):
            index = state.global_step * cfg.gradient_accumulation + micro
            rows = batch_rows(len(data.train), cfg.batch_size, index, recipe.seed)
            generator = seeded(recipe.seed, TRAINING_MASKS, index)
            inputs, targets = zip(*(masker(torch.from_numpy(data.train[r]).long(), generator) for r in rows))
            losses, _ = model(list(inputs), list(targets), backbone_grad=not head_only)  # (M,)
            if losses.numel():
                accelerator.backward(losses.mean() / cfg.gradient_accumulation)
                state.loss_sum += losses.mean().item()
                state.loss_batches += 1
            state.tokens += sum(len(ids) for ids in inputs)
        if head_only:
            for p in backbone_params:  # the tied decoder is the word embeddings: the backbone's, unchanged for now
                p.grad = None
        # Clip, step, schedule.
        if cfg.max_grad_norm > 0:
            accelerator.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        state.global_step += 1
        state.train_seconds = time.perf_counter() - started
        # Log every L steps; measure the held-out loss once the head has trained alone, and every N steps when asked;
        # checkpoint every M steps; stop cleanly on request.
        if state.global_step % cfg.log_every_steps == 0 or state.global_step == cfg.steps:
            log_training()
        if state.global_step == cfg.head_steps:
            measure("before")  # the backbone as loaded, with a trained head
        elif cfg.eval_every_steps and state.global_step % cfg.eval_every_steps == 0 and state.global_step < cfg.steps:
            measure("during")
        if state.global_step % cfg.checkpoint_every_steps == 0 and state.global_step < cfg.steps:
            checkpoint()
        if stop.is_set() and state.global_step < cfg.steps:
            checkpoint()
            raise TrainingInterrupted(f"pretraining stopped at step {state.global_step}; the checkpoint is in "
                                      f"{run_dir / CHECKPOINT}; continue with --resume")
    measure("after")
    checkpoint()

    backbone_dir = run_dir / BACKBONE
    save_backbone(core, tokenizer, recipe.backbone.name, backbone_dir)
    by_when = {entry["when"]: entry for entry in state.history}
    metrics = {
        "recipe": recipe.name,
        "strategy": recipe.strategy.name,
        "strategy_settings": dataclasses.asdict(recipe.strategy),
        "token_level_reading": callable(getattr(core.strategy, "encode_tokens", None)),
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
    write_text_atomically(run_dir / "metrics.json", json.dumps(metrics, indent=2))
    write_text_atomically(run_dir / "metrics.md", metrics_markdown(metrics))
    return PretrainResult(run_dir, backbone_dir, metrics)


def bucket_labels(learned_positions: int) -> dict[str, str]:
    return {"within_learned": f"positions 0-{learned_positions - 1}", "beyond_learned": f"positions {learned_positions}+"}


def describe(result: dict, learned_positions: int) -> str:
    """'2.345 (perplexity 10.4); positions 0-511: ...; positions 512+: ...' for one held-out measurement."""
    def one(entry):
        return "none" if entry["loss"] is None else f"{entry['loss']:.3f} (perplexity {entry['perplexity']:.1f})"

    labels = bucket_labels(learned_positions)
    return f"{one(result['all'])}; {'; '.join(f'{labels[key]}: {one(result[key])}' for key in BUCKETS)}"


# --------------------------------------------------------------------------------------------------------------
# The written backbone and the report


def save_backbone(model: MaskedLanguageModel, tokenizer, backbone_name: str, folder: Path) -> None:
    """Write the trained *ForMaskedLM (encoder and head, safetensors) and the tokenizer into `folder`, whole or not
    at all. The attention a strategy installed is not saved: the folder loads as the plain architecture (a strategy
    installs its own again). A sentence-transformers description of the original's pooling is copied along."""
    from longbert.utils.atomic import atomic_folder
    from longbert.modeling.backbone import attention_implementation, resolve_backbone
    from longbert.strategies.windows import usable_positions

    mlm = model.mlm
    installed = mlm.config._attn_implementation
    default = attention_implementation(type(mlm))
    with atomic_folder(folder) as staging:
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
        ("start", "start (head as loaded)"), ("before", "before (backbone as loaded)"), ("after", "after")) if when in heldout]
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
