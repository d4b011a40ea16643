"""LongDocumentClassifier: a BERT-family backbone + a long-document strategy + a classification head.

Its folder on disk (what `save_pretrained` writes and `from_pretrained` reads) is longbert.modeling.model_folder's; the
settings saved in it are longbert.modeling.settings'; how it reads texts (`predict`, `embed`) is
longbert.modeling.reads_texts's, which its int8 wrapper (longbert.modeling.int8) shares.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn

from longbert.config import is_multi_label
from longbert.data.documents import tokenize_documents
from longbert.errors import LongbertError
from longbert.modeling import hub
from longbert.modeling.backbone import (
    backbone_token_pooling,
    enable_activation_checkpointing,
    load_backbone,
    prepare_tokenizer,
)
from longbert.modeling.calibration import answered_probabilities
from longbert.modeling.ensemble import load_ensemble
from longbert.modeling.int8 import Int8Model
from longbert.modeling.model_folder import (
    adapter_of,
    load_folder_backbone,
    load_folder_head,
    load_folder_lexical,
    open_model_folder,
    read_training_facts,
    save_model_folder,
    wrap_lora,
)
from longbert.modeling.reads_texts import ReadsTexts, check_texts, read_in_batches
from longbert.modeling.settings import ModelSettings
from longbert.strategies.base import Pooled, SpecialTokens, Units, lora_modules_to_save
from longbert.strategies.registry import build_strategy
from longbert.utils.hardware import autocast_for


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, C)
    unit_weights: torch.Tensor | None = None  # (B, N): how much each chunk/window counted, when known
    unit_mask: torch.Tensor | None = None  # (B, N) bool: which units exist
    units: Units | None = None  # what the strategy's encode gave (the unit-level loss reads it)


class LongDocumentClassifier(ReadsTexts, nn.Module):
    """Classify whole documents. `forward` takes a list of (T,) token-id tensors (content tokens, no special
    tokens) or precomputed `Units`, and returns (B, C) logits; `predict` and `embed` read texts (`ReadsTexts`)."""

    def __init__(self, backbone, tokenizer, strategy, settings: ModelSettings):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.strategy = strategy
        self.settings = settings  # everything save/load needs to rebuild this object
        self.dropout = nn.Dropout(settings.classifier_dropout)
        self.head = nn.Linear(backbone.config.hidden_size, len(settings.label_names))
        self.notes: list[str] = []
        # The backbone's weights are no longer those settings.backbone names (train.init_from loaded trained ones
        # into it), so a saved folder must hold them even where the backbone stays frozen.
        self.backbone_weights_changed = False
        # what `longbert train` knew about this model (longbert.modeling.card.TrainingFacts), if any
        self.training_facts = None
        # a hybrid model's TF-IDF half (longbert.modeling.lexical.LexicalModel), mixed into `forward`'s output
        self.lexical = None
        # an ensemble's other members (longbert.modeling.ensemble.Ensemble), whose probabilities `forward` averages
        self.ensemble = None

    # -- building ---------------------------------------------------------------------------------------------

    @classmethod
    def from_recipe(cls, recipe, label_names: list[str], loaded: tuple | None = None) -> LongDocumentClassifier:
        """A fresh model for `recipe` (backbone weights loaded, strategy and head initialised from the seed).
        `loaded`: the (backbone, tokenizer) pair that `load_backbone(recipe.backbone...)` returned, when the caller
        has loaded them already (training tokenizes its data first), so nothing is loaded twice."""
        backbone, tokenizer = loaded or load_backbone(
            recipe.backbone.name, recipe.backbone.attention_dropout, recipe.backbone.hidden_dropout
        )
        if recipe.backbone.gradient_checkpointing:
            enable_activation_checkpointing(backbone)
        return cls._assemble(backbone, tokenizer, ModelSettings.from_recipe(recipe, label_names), adapter_dir=None)

    @classmethod
    def _assemble(cls, backbone, tokenizer, settings: ModelSettings, adapter_dir: Path | None):
        notes = []
        if getattr(settings.strategy, "token_pooling", None) == "auto":  # the saved settings record what it became
            settings.strategy.token_pooling, why = backbone_token_pooling(backbone)
            notes.append(f"strategy.token_pooling: auto -> {settings.strategy.token_pooling} ({why})")
        special = SpecialTokens.from_tokenizer(tokenizer)
        strategy = build_strategy(settings.strategy, backbone.config.hidden_size, special, settings.budget)
        strategy.adapt_backbone(backbone)
        if settings.trains_lora:
            backbone = wrap_lora(backbone, settings.lora, adapter_dir, lora_modules_to_save(strategy))
        elif settings.backbone_frozen:
            backbone.requires_grad_(False)
        model = cls(backbone, tokenizer, strategy, settings)
        model.notes = notes  # what building decided on the recipe's behalf; training prints it
        return model

    # -- running ----------------------------------------------------------------------------------------------

    @property
    def label_names(self) -> list[str]:
        return self.settings.label_names

    @property
    def multi_label(self) -> bool:
        return is_multi_label(self.settings.problem_type)

    @property
    def frozen(self) -> bool:
        return self.settings.backbone_frozen

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:
            self.backbone.eval()  # a frozen backbone never uses dropout: its cached embeddings stay valid
        return self

    def encode(self, documents: list[torch.Tensor]) -> Units:
        """Run the backbone through the strategy: B documents -> Units (B, N, H)."""
        return self.strategy.encode(self.backbone, documents)

    def forward(self, documents: list[torch.Tensor] | None = None, units: Units | None = None,
                reader: Callable[[LongDocumentClassifier, list[torch.Tensor]], Units] | None = None
                ) -> ClassifierOutput:
        """(B, C) logits; a hybrid model's are the log of its mixed probabilities (see `longbert.modeling.lexical`),
        so it needs `documents`, which its TF-IDF half reads. `reader(model, documents) -> Units` reads the documents
        in place of `encode` (training's `train.reading`: longbert.training.selective)."""
        if units is None:
            units = self.encode(documents) if reader is None else reader(self, documents)
        pooled: Pooled = self.strategy.pool(units)  # (B, H)
        logits = self.head(self.dropout(pooled.vector))  # (B, C)
        if self.lexical is not None:
            if documents is None:
                raise LongbertError("a hybrid model's TF-IDF half reads the documents' token ids: pass documents, "
                                    "not cached units")
            logits = self.lexical.fuse(logits, documents)
        if self.ensemble is not None:
            if documents is None:
                raise LongbertError("an ensemble's members read the documents' token ids: pass documents, not "
                                    "cached units")
            logits = self.ensemble.logits(logits, documents)
            pooled = Pooled(pooled.vector, None)  # the first member's unit weights are not the ensemble's
        return ClassifierOutput(logits, pooled.weights, units.mask, units)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor,
             class_weights: torch.Tensor | None = None) -> torch.Tensor:
        """logits (B, C), labels (B,) or (B, C) multi-hot -> the mean loss. `class_weights` (C,): cross-entropy class
        weights (a weighted mean over documents), or for multi-label the pos_weight of each label."""
        if class_weights is not None:
            class_weights = class_weights.to(logits.device, torch.float32)
        if self.multi_label:
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(),
                                                                  pos_weight=class_weights)
        return nn.functional.cross_entropy(logits.float(), labels, weight=class_weights)

    def unit_loss(self, units: Units, labels: torch.Tensor,
                  class_weights: torch.Tensor | None = None) -> torch.Tensor:
        """Unit-level supervision: every unit (a chunk, a window, a segment, a span) classified by the head on its own,
        each learning its document's label; units (B, N, H), labels (B,) or (B, C) -> one loss, the mean over
        documents of the mean over each document's units (a document weighs the same however many units it has).
        A unit that holds no evidence (filler) is pushed towards the prior, one that holds it towards the label, so
        the encoder learns what a deciding unit looks like from every unit of a small dataset, and not only through
        the pooler's mixture (multiple-instance learning's instance-level loss)."""
        logits = self.head(self.dropout(units.vectors)).float()  # (B, N, C)
        b, n, c = logits.shape
        if class_weights is not None:
            class_weights = class_weights.to(logits.device, torch.float32)
        if self.multi_label:
            targets = labels.float().unsqueeze(1).expand(b, n, c)  # (B, N, C)
            per_unit = nn.functional.binary_cross_entropy_with_logits(logits, targets, pos_weight=class_weights,
                                                                      reduction="none").mean(-1)  # (B, N)
        else:
            per_unit = nn.functional.cross_entropy(logits.reshape(b * n, c), labels.repeat_interleave(n),
                                                   weight=class_weights, reduction="none").view(b, n)  # (B, N)
        mask = units.mask.to(per_unit.dtype)  # (B, N)
        return ((per_unit * mask).sum(1) / mask.sum(1).clamp(min=1.0)).mean()

    @property
    def thresholds(self) -> list[float]:
        """The multi-label decision threshold of each label (0.5 unless tuned or set)."""
        return self.settings.thresholds or [0.5] * len(self.label_names)

    def probabilities(self, logits: torch.Tensor, calibrated: bool = True) -> torch.Tensor:
        """(B, C) logits -> what the model answers: class probabilities, calibrated by the temperatures fitted on
        validation when the model has them (`calibrated=False`: as the logits give them)."""
        return answered_probabilities(self.settings, logits, calibrated)

    @property
    def calibrated(self) -> bool:
        """Whether the model's probabilities are calibrated (it holds temperatures fitted on validation)."""
        return self.settings.temperatures is not None

    def without_calibration(self) -> LongDocumentClassifier:
        """This model, its calibration taken off (in place; returned): it answers the probabilities its logits give,
        with multi-label thresholds moved to make the same decisions (`ModelSettings.without_calibration`)."""
        self.settings = self.settings.without_calibration()
        self.__dict__.pop("_int8_model", None)  # an int8 copy made before holds the calibrated settings
        return self

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        """Texts -> ((T,) content-id tensors cut at max_document_tokens, full lengths with [CLS]/[SEP])."""
        ids, lengths = tokenize_documents(self.tokenizer, texts, self.settings.max_document_tokens)
        return [torch.tensor(d, dtype=torch.long) for d in ids], lengths

    def read_as_done(self, texts: list[str], batch_size: int, precision: str,
                     compute: Callable) -> Iterator[tuple[int, list, int]]:
        """(index, compute(the model that runs at `precision`, its batch)[row] as a list, full length): predictions'
        and embeddings' loop."""
        check_texts(texts, batch_size)
        autocast = autocast_for(self, precision)
        model = self.for_precision(precision)
        yield from read_in_batches(self, texts, batch_size, autocast, lambda documents: compute(model, documents))

    def for_precision(self, precision: str, recheck_gap: float | None = None) -> LongDocumentClassifier | Int8Model:
        """The model that runs at `precision`: this one, or for int8 its `Int8Model` (longbert.modeling.int8: a copy
        whose backbone Linear layers are dynamically quantized, its close calls read again by this model). The
        wrapper is made at its first use, from the weights then, and kept (outside the module tree: never saved, never
        moved with the model). `recheck_gap` sets the wrapper's (None: as it is, at first use `int8_recheck_gap`)."""
        if precision != "int8":
            return self
        if self.__dict__.get("_int8_model") is None:
            self.__dict__["_int8_model"] = Int8Model(self)
        if recheck_gap is not None:
            self.__dict__["_int8_model"].recheck_gap = recheck_gap
        return self.__dict__["_int8_model"]

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # -- saving and loading -----------------------------------------------------------------------------------

    def _outside_backbone(self) -> nn.ModuleDict:
        """The parts saved in head.safetensors, under the names they have in this model (`strategy.*`, `head.*`)."""
        return nn.ModuleDict({"strategy": self.strategy, "head": self.head})

    def head_state(self) -> dict[str, torch.Tensor]:
        """Everything outside the backbone: the strategy's weights and the classification head."""
        return {k: v.detach().contiguous().cpu() for k, v in self._outside_backbone().state_dict().items()}

    def load_head_state(self, state: dict[str, torch.Tensor]) -> None:
        """The inverse of `head_state`; a missing, unexpected or misshapen tensor raises RuntimeError."""
        self._outside_backbone().load_state_dict(state)

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the model folder atomically: it appears complete or not at all. The backbone's weights go in it
        (backbone/) when they were fine-tuned or came from a local folder; a frozen or LoRA backbone that is the
        packaged MiniLM or a hub model is named instead (see `longbert.modeling.model_folder.save_model_folder`)."""
        save_model_folder(self, directory)

    def plain_backbone(self):
        """The encoder as transformers saves it: without LoRA's layers (a copy; LoRA leaves the weights it wraps as
        they were)."""
        if not self.settings.trains_lora:
            return self.backbone
        return copy.deepcopy(self.backbone).unload()

    def push_to_hub(self, repo_id: str, private: bool | None = None, token: str | bool | None = None,
                    commit_message: str | None = None, revision: str | None = None, create_pr: bool = False):
        """Upload this model, saved as `save_pretrained` writes it, to hub repository `repo_id` (see
        `longbert.modeling.hub.push_to_hub`); `from_pretrained(repo_id)` loads it back."""
        return hub.push_to_hub(self, repo_id, private=private, token=token, commit_message=commit_message,
                               revision=revision, create_pr=create_pr)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **hub_options) -> LongDocumentClassifier:
        """Load a folder written by `save_pretrained` (or a run folder's `best/` model), or a model on the hub by its
        id ('user/name'; `hub_options` as `longbert.modeling.hub.download` takes them: revision, cache_dir, token,
        local_files_only, force_download). A damaged or incomplete folder raises one LongbertError line naming the
        file and what is wrong with it."""
        directory, settings = open_model_folder(directory, **hub_options)
        backbone, tokenizer = load_folder_backbone(directory, settings)
        model = cls._assemble(backbone, tokenizer, settings, adapter_dir=adapter_of(directory, settings))
        load_folder_head(model, directory)
        model.lexical = load_folder_lexical(directory, settings, backbone.config.vocab_size)
        model.training_facts = read_training_facts(directory)
        model.ensemble = load_ensemble(directory, cls, backbone.config.vocab_size)
        model.eval()
        return model
