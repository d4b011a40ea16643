"""`train.reading` (longbert.config.train_reading): the end-to-end stage reads the units that decide a document with
gradient and takes the rest from a cache.

A fine-tuned pooler puts nearly all of a document's weight on one or two of its units (benchmarks/log.md), yet every
unit goes forward and backward through every layer. `UnitReader` is what the training loop hands the model in their
place (`LongDocumentClassifier.forward(reader=...)`):

- grad_units: each document's units are first taken from a cache of their last vectors (filled, without gradient,
  the first time a document is met, and again every refresh_epochs epochs). The pooler weighs those; the top
  grad_units units, and random_units drawn from the rest, are read again with gradient, and their fresh vectors
  replace the cached ones there and in the cache. Pooling and the unit loss see every unit; the gradient reaches the
  backbone through the units read with it. A document of at most grad_units + random_units units is read whole, as
  the model reads it.
- frozen_layers: the embeddings and the first frozen_layers layers never change, so each window's token states after
  them are computed once (without gradient, as inference computes them) and kept; every later read runs only the
  layers above.

Both need a strategy whose units are windows read independently (`ReadsWindows`: chunk, sliding; truncate for
frozen_layers, which has one window); grad_units also needs a pooler whose weights follow what the units hold.
bigbird reads a whole document in one block-sparse pass, and recurrence and rmt read segments in order through a
memory, so one of their units cannot be read again alone: they read as before, and the run's log and record say so.
The reader counts the tokens it read with and without gradient and those it took from its cache.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager

import torch
from torch import nn

from longbert.errors import LongbertError
from longbert.strategies.attention import base_model
from longbert.strategies.base import PassBudget, ReadsWindows, Units, WeighsUnits
from longbert.strategies.windows import plan_passes, run_passes, units_of_cuts
from longbert.utils.logs import main_process_logger

log = main_process_logger(__name__)


def reading_applies(model, config) -> tuple[bool, bool, str | None]:
    """Whether `config`'s grad_units and frozen_layers apply to `model`'s strategy, and when one does not, why (a
    sentence for the log and the run's record)."""
    strategy, name = model.strategy, model.settings.strategy.name
    if not isinstance(strategy, ReadsWindows):
        why = (f"strategy {name} does not read its units as independent windows (bigbird reads a document in one "
               "block-sparse pass; recurrence and rmt read segments in order through a memory), so no unit can be "
               "read again alone: every unit is read with gradient through every layer")
        return False, False, why if config.selective else None
    units = config.grad_units is not None
    why = None
    pooling = getattr(strategy.config, "pooling", None)
    carries = isinstance(strategy, WeighsUnits) and strategy.weights_carry_content() and pooling != "transformer"
    if units and not isinstance(strategy, WeighsUnits):
        units = False
        why = f"strategy {name} reads one unit a document: train.reading.grad_units has nothing to choose among"
    elif units and not carries:
        units = False
        why = (f"train.reading.grad_units needs a pooling whose weights follow what the units hold (vote, attention, "
               f"gated, max); strategy {name} pools with {pooling}, so every unit is read with gradient")
    return units, config.frozen_layers > 0, why


def document_key(ids: torch.Tensor) -> str:
    """A document's cache key: the hash of its token ids (two identical documents share their cached units)."""
    return hashlib.blake2b(ids.cpu().numpy().tobytes(), digest_size=12).hexdigest()


class PassThrough(nn.Module):
    """Stands in for the backbone's embeddings when the states a pass starts from are the cached ones."""

    def forward(self, inputs_embeds=None, **_):
        return inputs_embeds


@contextmanager
def layers_between(backbone: nn.Module, start: int, stop: int | None):
    """Within the block, the backbone runs only its layers start..stop-1, and, when start > 0, takes the token states
    to start from as `inputs_embeds` (its embeddings stand aside). The model's own forward does the rest (its
    attention mask, its attention implementation)."""
    model = base_model(backbone)
    encoder = getattr(model, "encoder", None)
    layers = getattr(encoder, "layer", None)
    if not isinstance(layers, nn.ModuleList):
        raise LongbertError(f"train.reading.frozen_layers needs a BERT-style backbone (encoder.layer); "
                            f"{type(model).__name__} has none")
    embeddings = model.embeddings
    encoder.layer = nn.ModuleList(list(layers)[start:stop])
    if start > 0:
        model.embeddings = PassThrough()
    try:
        yield
    finally:
        encoder.layer = layers
        model.embeddings = embeddings


def check_frozen_layers(backbone: nn.Module, layers: int) -> list:
    """The backbone's encoder layers, once `layers` (train.reading.frozen_layers) is known to leave one to train: a
    LongbertError line otherwise. The run checks it as soon as the backbone is loaded, before any stage."""
    encoder_layers = getattr(getattr(base_model(backbone), "encoder", None), "layer", None)
    total = len(encoder_layers) if isinstance(encoder_layers, nn.ModuleList) else 0
    if layers >= total:
        raise LongbertError(f"train.reading.frozen_layers must leave a layer to train: the backbone has {total} "
                            f"layers, got {layers}")
    return list(encoder_layers)


def freeze_lower_layers(model, layers: int) -> None:
    """Stop the embeddings and the first `layers` layers of `model`'s backbone from training."""
    encoder_layers = check_frozen_layers(model.backbone, layers)
    base_model(model.backbone).embeddings.requires_grad_(False)
    for layer in encoder_layers[:layers]:
        layer.requires_grad_(False)


def cache_bytes(model, lengths: list[int], dtype: torch.dtype) -> int:
    """What frozen_layers' cache of token states takes for documents of `lengths` content tokens: every window's
    tokens with its [CLS] and [SEP], hidden_size values of `dtype` each."""
    tokens = 0
    for length in lengths:
        windows, _ = model.strategy.windows(torch.zeros(length, dtype=torch.long))
        tokens += sum(w.shape[0] + 2 for w in windows)
    return tokens * model.backbone.config.hidden_size * torch.finfo(dtype).bits // 8


def check_cache_size(model, config, lengths: list[int], dtype: torch.dtype) -> None:
    """Refuse, in one line, a cache of frozen_layers' token states (`config`: train.reading) for training documents
    of `lengths` content tokens that would hold more than config.max_cache_gb."""
    size = cache_bytes(model, lengths, dtype)
    per_token = model.backbone.config.hidden_size * torch.finfo(dtype).bits // 8
    if size > config.max_cache_gb * 1e9:
        raise LongbertError(
            f"train.reading.frozen_layers caches {per_token} bytes a token ({dtype} states of "
            f"{model.backbone.config.hidden_size} values): the training documents need {size / 1e9:.3g} GB, more "
            f"than train.reading.max_cache_gb ({config.max_cache_gb:g}); raise it where the memory is there, or "
            "train on fewer or shorter documents (data.max_train_documents, data.max_document_tokens)")


class UnitReader:
    """Reads a batch's documents as `train.reading` says (see the module docstring); called by the model's forward
    as `reader(model, documents) -> Units`."""

    def __init__(self, model, config, lengths: list[int], cache_dtype: torch.dtype):
        self.config = config
        self.selects, self.layers, self.why_not = reading_applies(model, config)
        self.vectors: dict[str, torch.Tensor] = {}  # document key -> (N, H) float32 on the CPU: the unit cache
        self.states: dict[str, list[torch.Tensor]] = {}  # document key -> each window's (L_w, H) lower-layer states
        self.refreshed_epoch = -1
        # tokens read with gradient; read without it (a unit's vector cached); taken from the cache instead of read;
        # read through the frozen layers alone, their states cached (each document once)
        self.counts = {"tokens_with_gradient": 0, "tokens_without_gradient": 0, "tokens_from_cache": 0,
                       "tokens_below_frozen_layers": 0}
        self.cache_dtype = cache_dtype
        if self.why_not:
            log.info(f"train.reading: {self.why_not}")
        if self.layers:
            check_cache_size(model, config, lengths, cache_dtype)
            freeze_lower_layers(model, config.frozen_layers)

    @property
    def whole_up_to(self) -> int:
        """A document of at most this many units is read whole, with gradient, as the model reads it: grad_units top
        units and random_units drawn from the rest would be all of its units, and a read without gradient first
        would only add to their cost."""
        return self.config.grad_units + self.config.random_units

    @property
    def active(self) -> bool:
        return self.selects or self.layers

    def start_epoch(self, epoch: int) -> None:
        """Every refresh_epochs epochs (not the first), forget the cached unit vectors: each is read anew, without
        gradient, when its document is next met. (Once per epoch, also when a resumed run starts it again.)"""
        every = self.config.refresh_epochs
        if self.selects and every and epoch > 0 and epoch % every == 0 and self.refreshed_epoch != epoch:
            self.vectors.clear()
            self.refreshed_epoch = epoch

    # -- reading -----------------------------------------------------------------------------------------------

    def __call__(self, model, documents: list[torch.Tensor]) -> Units:
        strategy = model.strategy
        if not self.active:  # the model's own reading
            self.counts["tokens_with_gradient"] += sum(
                sum(w.shape[0] for w in strategy.windows(ids)[0]) if isinstance(strategy, ReadsWindows)
                else ids.shape[0] for ids in documents)
            return model.encode(documents)
        cuts = [strategy.windows(ids) for ids in documents]
        keys = [document_key(ids) for ids in documents]
        if self.layers:
            self._lower_states(model, cuts, keys)
        if not self.selects or all(len(w) <= self.whole_up_to for w, _ in cuts):
            every = [(k, j, w) for k, (windows, _) in zip(keys, cuts) for j, w in enumerate(windows)]
            if not self.layers:  # nothing to select: the model's own reading, exactly
                self.counts["tokens_with_gradient"] += sum(w.shape[0] for _, _, w in every)
                return model.encode(documents)
            return units_of_cuts(self._read(model, every, gradient=True), cuts)
        # A document of more units than are read with gradient met for the first time (or since a refresh): every
        # unit read without gradient. One of no more is read whole with gradient below, and needs no cache.
        chooses = [len(windows) > self.whole_up_to for windows, _ in cuts]
        missing = [(k, c) for k, c, more in zip(keys, cuts, chooses) if more and k not in self.vectors]
        if missing:
            flat = [(k, j, w) for k, (windows, _) in missing for j, w in enumerate(windows)]
            vectors = self._read(model, flat, gradient=False).float().cpu()  # (W, H)
            start = 0
            for k, (windows, _) in missing:
                self.vectors[k] = vectors[start : start + len(windows)]
                start += len(windows)
        device = next(model.parameters()).device
        hidden = model.backbone.config.hidden_size
        cached = [self.vectors[k] if more else torch.zeros(len(windows), hidden)
                  for k, (windows, _), more in zip(keys, cuts, chooses)]
        stale = units_of_cuts(torch.cat(cached).to(device), cuts)  # (B, N, H)
        with torch.no_grad():
            weights = strategy.pool(stale).weights.float()  # (B, N)
        chosen = self._choose(weights, [len(w) for w, _ in cuts], chooses)
        picked = [(keys[b], j, cuts[b][0][j]) for b, j in chosen]
        fresh = self._read(model, picked, gradient=True)  # (S, H)
        rows = torch.tensor([b for b, _ in chosen], device=device)
        columns = torch.tensor([j for _, j in chosen], device=device)
        vectors = stale.vectors.to(fresh.dtype).index_put((rows, columns), fresh)  # (B, N, H)
        for (key, j, _), vector in zip(picked, fresh.detach().float().cpu()):
            if key in self.vectors:
                self.vectors[key][j] = vector
        every_token = sum(w.shape[0] for windows, _ in cuts for w in windows)
        self.counts["tokens_from_cache"] += every_token - sum(w.shape[0] for _, _, w in picked)
        return Units(vectors, stale.mask, stale.sizes)

    def _choose(self, weights: torch.Tensor, counts: list[int], chooses: list[bool]) -> list[tuple[int, int]]:
        """(document, unit) pairs to read with gradient: where `chooses`, each document's top grad_units units by
        `weights` (B, N), then random_units drawn at random among its others (torch's random state, which
        checkpoints keep); elsewhere every unit, nothing drawn."""
        chosen = []
        for b, (n, more) in enumerate(zip(counts, chooses)):
            if not more:
                chosen += [(b, j) for j in range(n)]
                continue
            order = weights[b, :n].argsort(descending=True).tolist()
            top, rest = order[: self.config.grad_units], order[self.config.grad_units :]
            drawn = [rest[i] for i in torch.randperm(len(rest))[: self.config.random_units].tolist()]
            chosen += [(b, j) for j in sorted(top + drawn)]
        return chosen

    def _read(self, model, windows: list[tuple[str, int, torch.Tensor]], gradient: bool) -> torch.Tensor:
        """Window vectors (W, H) of (document key, window index, content ids) triples: through the whole backbone,
        or from their cached lower-layer states through the layers above; with or without gradient (without it in
        eval mode, as inference reads: no dropout, and nothing drawn from the random state)."""
        tokens = sum(w.shape[0] for _, _, w in windows)
        self.counts["tokens_with_gradient" if gradient else "tokens_without_gradient"] += tokens
        strategy, backbone = model.strategy, model.backbone
        was_training = backbone.training
        if not gradient:
            backbone.eval()
        try:
            with torch.set_grad_enabled(gradient and torch.is_grad_enabled()):
                if not self.layers:
                    def run(input_ids, attention_mask):
                        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                        return strategy.window_vectors(hidden, attention_mask)  # (W, H)

                    device = next(backbone.parameters()).device
                    return run_passes([w for _, _, w in windows], strategy.special, strategy.budget, run, device)
                states = [self.states[k][j] for k, j, _ in windows]
                return upper_layers(model, states, self.config.frozen_layers, strategy.budget)
        finally:
            backbone.train(was_training)

    def _lower_states(self, model, cuts, keys) -> None:
        """Each window's token states after the frozen layers, for documents not yet met: computed once, kept. A
        document's windows go through in passes of their own, so its states do not depend on the batch it came in
        (a resumed run, which computes them again, gets them to the bit)."""
        strategy, backbone = model.strategy, model.backbone
        device = next(backbone.parameters()).device
        was_training = backbone.training
        backbone.eval()
        try:
            with torch.no_grad(), layers_between(backbone, 0, self.config.frozen_layers):
                for key, (windows, _) in zip(keys, cuts):
                    if key in self.states:
                        continue
                    width = max(w.shape[0] for w in windows) + 2

                    def run(input_ids, attention_mask, width=width):
                        hidden = backbone(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                        return nn.functional.pad(hidden, (0, 0, 0, width - hidden.shape[1]))  # (W, width, H)

                    states = run_passes(windows, strategy.special, strategy.budget, run, device)  # (W, width, H)
                    self.counts["tokens_below_frozen_layers"] += sum(w.shape[0] for w in windows)
                    self.states[key] = [states[i, : w.shape[0] + 2].to("cpu", self.cache_dtype).clone()
                                        for i, w in enumerate(windows)]
        finally:
            backbone.train(was_training)

    # -- what a checkpoint keeps -------------------------------------------------------------------------------

    def state(self) -> dict[str, torch.Tensor]:
        """The unit cache and the counts, as tensors (a resumed run continues from them exactly)."""
        out = {f"unit.{k}": v.contiguous() for k, v in self.vectors.items()}
        out["refreshed_epoch"] = torch.tensor(self.refreshed_epoch)
        out.update({f"count.{k}": torch.tensor(v) for k, v in self.counts.items()})
        return out

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        self.vectors = {k.removeprefix("unit."): v for k, v in state.items() if k.startswith("unit.")}
        self.refreshed_epoch = int(state["refreshed_epoch"])
        self.counts = {k: int(state[f"count.{k}"]) for k in self.counts if f"count.{k}" in state}

    def record(self) -> dict:
        """What the run's record keeps of how the end-to-end stage read."""
        out = {"grad_units": self.config.grad_units if self.selects else None,
               "random_units": self.config.random_units if self.selects else None,
               "refresh_epochs": self.config.refresh_epochs if self.selects else None,
               "frozen_layers": self.config.frozen_layers if self.layers else 0, **self.counts}
        if self.why_not:
            out["not_applied"] = self.why_not
        return out


def upper_layers(model, states: list[torch.Tensor], frozen: int, budget: PassBudget) -> torch.Tensor:
    """Cached lower-layer states of windows (each (L_w, H), [CLS] and [SEP] included) -> window vectors (W, H), the
    layers above `frozen` run in passes bounded by `budget`, as the backbone's own passes are."""
    strategy, backbone = model.strategy, model.backbone
    device = next(backbone.parameters()).device
    out = None
    for indices in plan_passes([s.shape[0] for s in states], budget.on(device)):
        width = max(states[i].shape[0] for i in indices)
        hidden = torch.zeros(len(indices), width, states[0].shape[-1], device=device)  # (W, L, H)
        mask = torch.zeros(len(indices), width, dtype=torch.long, device=device)  # (W, L)
        for row, i in enumerate(indices):
            hidden[row, : states[i].shape[0]] = states[i].to(device, torch.float32)
            mask[row, : states[i].shape[0]] = 1
        with layers_between(backbone, frozen, None):
            top = backbone(inputs_embeds=hidden, attention_mask=mask).last_hidden_state  # (W, L, H)
        vectors = strategy.window_vectors(top, mask)  # (W, H)
        if out is None:
            out = vectors.new_zeros((len(states), vectors.shape[-1]))
        out = out.index_copy(0, torch.tensor(indices, device=device), vectors)
    return out  # (W, H)



def cache_dtype(accelerator) -> torch.dtype:
    """The precision frozen_layers' cache of token states is kept in: the one the run computes in."""
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(accelerator.mixed_precision, torch.float32)


def unit_reader(recipe, model, corpus, accelerator) -> UnitReader:
    """The reader of an end-to-end stage (the model's own reading, counted, where train.reading changes nothing),
    its cache of lower-layer states in the precision the run computes in."""
    return UnitReader(model, recipe.train.reading, list(corpus.splits["train"]["n_tokens"]), cache_dtype(accelerator))


def check_reading_before_training(recipe, model, corpus, accelerator) -> None:
    """What the end-to-end stage's reader would refuse (a cache of frozen_layers' states over max_cache_gb), checked
    on a model of the run's strategy before an earlier stage (the head stage) trains."""
    if reading_applies(model, recipe.train.reading)[1]:
        check_cache_size(model, recipe.train.reading, list(corpus.splits["train"]["n_tokens"]),
                         cache_dtype(accelerator))
