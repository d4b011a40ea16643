"""LongDocumentClassifier: a BERT-family backbone + a long-document strategy + a classification head.

Saved in the Hugging Face style, without pickle:
    <dir>/longbert_config.json   ModelSettings: strategy, labels, problem type, backbone reference, fine-tuning mode
                                 (the source of truth)
    <dir>/config.json            what transformers reads (model type "longbert", labels; see longbert.hf.config)
    <dir>/head.safetensors       the strategy's own weights (poolers) and the classification head
    <dir>/backbone/              the encoder (safetensors + config): the fine-tuned one, or in frozen and LoRA mode the
                                 one they started from when it came from a local folder
    <dir>/adapter/               LoRA: the peft adapter (adapter_model.safetensors + adapter_config.json)
    <dir>/tokenizer files        the tokenizer
    <dir>/README.md              the model card (longbert.modeling.card), and training.json, what its training run knew
A folder is self-contained: a frozen or LoRA backbone that is not in it is the packaged MiniLM or a hub model, named
in longbert_config.json; no path of the machine that saved it is written, so it can be moved or uploaded as it is.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from longbert.utils.atomic import atomic_folder
from longbert.modeling.backbone import (MINILM, MINILM_HUB_ID, SAVED_IN_FOLDER, backbone_token_pooling, clear_load_errors,
                               default_lora_targets, load_backbone, load_encoder, load_tokenizer, portable_reference,
                               prepare_tokenizer)
from longbert.config import FINETUNE_MODES, PROBLEM_TYPES, LoraConfig, build
from longbert.errors import LongbertError
from longbert.config.fields import one_of, option
from longbert.utils.hardware import autocast_for
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, build_strategy

CONFIG_FILE = "longbert_config.json"
HEAD_FILE = "head.safetensors"
BACKBONE_DIR = "backbone"
ADAPTER_DIR = "adapter"
FORMAT_VERSION = 1


@dataclass
class ModelSettings:
    """Everything `from_pretrained` needs to rebuild a model: written as longbert_config.json, read back through
    the same validation as recipes (`config.build`), and every key must be there (nothing is silently defaulted)."""

    format: int = option(FORMAT_VERSION, "longbert's model folder format")
    backbone: str = option("minilm", "the backbone as the recipe named it; in a saved folder `minilm` or a hub id (loaded "
                                     "again when its weights are not saved), or `backbone/` (saved in the folder)")
    attention_dropout: float | None = option(None, "attention_probs_dropout_prob override; null keeps the model's")
    hidden_dropout: float | None = option(None, "hidden_dropout_prob override; null keeps the model's")
    budget: PassBudget = option(None, "how much goes through the backbone in one pass", default_factory=PassBudget)
    strategy: Any = option(None, "the strategy's settings; `name` picks it")
    problem_type: str = option("single_label", "single_label or multi_label")
    finetune: str = option("full", "full, lora or frozen")
    classifier_dropout: float = option(0.1, "dropout before the classification head")
    lora: LoraConfig = option(None, "LoRA settings, used when finetune is lora", default_factory=LoraConfig)
    max_document_tokens: int = option(16384, "per-document token cap applied when tokenizing texts")
    label_names: list[str] = option([], "class names in index order")
    thresholds: list[float] | None = option(None, "multi-label decision threshold per label (tuned on validation or set by the recipe); null, or absent from the file (as before it existed): 0.5")

    @classmethod
    def from_recipe(cls, recipe, label_names: list[str]) -> "ModelSettings":
        """The settings of a model built from a validated `Recipe` for these classes."""
        return cls(
            backbone=recipe.backbone.name,
            attention_dropout=recipe.backbone.attention_dropout,
            hidden_dropout=recipe.backbone.hidden_dropout,
            budget=recipe.backbone.budget,
            strategy=copy.deepcopy(recipe.strategy),
            problem_type=recipe.model.problem_type,
            finetune=recipe.model.finetune,
            classifier_dropout=recipe.model.classifier_dropout,
            lora=copy.deepcopy(recipe.model.lora),
            max_document_tokens=recipe.data.max_document_tokens,
            label_names=list(label_names),
        )

    def problems(self, path: str) -> list[str]:
        out = one_of("problem_type", self.problem_type, PROBLEM_TYPES) + one_of("finetune", self.finetune, FINETUNE_MODES)
        for name in ("attention_dropout", "hidden_dropout", "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                out.append(f"{name} must be in [0, 1), got {value}")
        for name, value in (("budget.max_windows", self.budget.max_windows), ("budget.max_tokens", self.budget.max_tokens),
                            ("max_document_tokens", self.max_document_tokens)):
            if value < 1:
                out.append(f"{name} must be >= 1, got {value}")
        if not 0 <= self.budget.max_padding <= 1:
            out.append(f"budget.max_padding must be in [0, 1], got {self.budget.max_padding}")
        if not self.label_names or len(set(self.label_names)) != len(self.label_names):
            out.append(f"label_names must name each class once, got {self.label_names}")
        if self.thresholds is not None and (len(self.thresholds) != len(self.label_names)
                                            or not all(0 < t < 1 for t in self.thresholds)):
            out.append(f"thresholds must hold one number in (0, 1) per label, got {self.thresholds}")
        return out

    def to_dict(self) -> dict:
        raw = dataclasses.asdict(self)
        if raw["thresholds"] is None:  # format 1 files from before thresholds existed hold none: they mean 0.5
            del raw["thresholds"]
        return raw

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> "ModelSettings":
        """Validate saved settings; one LongbertError naming `source` and every problem (wrong type, bad value,
        unknown key, missing key, unknown strategy)."""
        if not isinstance(raw, dict):
            raise LongbertError(f"{source} is damaged: it must hold a JSON object, got {type(raw).__name__}")
        if raw.get("format") != FORMAT_VERSION:
            raise LongbertError(f"{source} was written by another longbert format ({raw.get('format')!r}); "
                                f"this longbert reads format {FORMAT_VERSION}")
        raw = _with_absent_means(raw)
        problems: list[str] = []
        settings = build(cls, raw, "", problems)
        where = [_path_of(p) for p in problems]
        # Keys the file lacks (not counting those inside a section already reported as malformed); a problem found
        # in the default that stood in for a missing key is left out: the missing key is its cause.
        missing = [k for k in _missing_keys(settings.to_dict(), raw) if not any(_within(k, w) for w in where)]
        problems = [f"missing key {k!r}" for k in missing] + [
            p for p, w in zip(problems, where) if not any(w == k or _within(w, k) for k in missing)]
        if problems:
            detail = "; ".join(problems)
            raise LongbertError(f"{source}: {detail}" if len(problems) == 1 else f"{source} has {len(problems)} problems: {detail}")
        return settings

    @classmethod
    def from_file(cls, path: Path) -> "ModelSettings":
        """Read and validate a saved longbert_config.json (see `from_dict`)."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise LongbertError(f"{path} is damaged: {error}") from None
        return cls.from_dict(raw, str(path))


def _with_absent_means(raw: dict) -> dict:
    """A saved strategy section from before a setting existed: the setting takes the value that reproduces how that
    model was trained (the strategy config's ABSENT_MEANS, e.g. chunk's unit_weights: equal), not today's default."""
    from longbert.strategies.base import REGISTRY

    section = raw.get("strategy")
    entry = REGISTRY.get(section.get("name")) if isinstance(section, dict) else None
    absent = getattr(entry.config_cls, "ABSENT_MEANS", {}) if entry is not None else {}
    if not any(key not in section for key in absent):
        return raw
    return {**raw, "strategy": {**{k: v for k, v in absent.items() if k not in section}, **section}}


def _path_of(problem: str) -> str:
    """The dotted path a validation problem starts with: 'strategy.window must be ...' -> 'strategy.window'."""
    return problem.split(" ", 1)[0].rstrip(":")


def _within(path: str, section: str) -> bool:
    return path.startswith(section + ".")


def _missing_keys(complete: dict, raw: dict, path: str = "") -> list[str]:
    """The keys of `complete` (a `to_dict()`) that `raw` lacks, as dotted paths, looking inside nested sections."""
    out = []
    for key, value in complete.items():
        where = f"{path}.{key}" if path else key
        if key not in raw:
            out.append(where)
        elif isinstance(value, dict):  # a section written as null (or as a strategy's bare name) lacks its keys
            out += _missing_keys(value, raw[key] if isinstance(raw[key], dict) else {}, where)
    return out


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, C)
    unit_weights: torch.Tensor | None = None  # (B, N): how much each chunk/window counted, when known
    unit_mask: torch.Tensor | None = None  # (B, N) bool: which units exist


class LongDocumentClassifier(nn.Module):
    """Classify whole documents. `forward` takes a list of (T,) token-id tensors (content tokens, no special
    tokens) or precomputed `Units`, and returns (B, C) logits."""

    def __init__(self, backbone, tokenizer, strategy, settings: ModelSettings):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.strategy = strategy
        self.settings = settings  # everything save/load needs to rebuild this object
        self.dropout = nn.Dropout(settings.classifier_dropout)
        self.head = nn.Linear(backbone.config.hidden_size, len(settings.label_names))
        self.notes: list[str] = []
        self.training_facts = None  # what `longbert train` knew about this model (longbert.modeling.card.TrainingFacts), if any

    # -- building ---------------------------------------------------------------------------------------------

    @classmethod
    def from_recipe(cls, recipe, label_names: list[str], loaded: tuple | None = None) -> "LongDocumentClassifier":
        """A fresh model for `recipe` (backbone weights loaded, strategy and head initialised from the seed).
        `loaded`: the (backbone, tokenizer) pair that `load_backbone(recipe.backbone...)` returned, when the caller
        has loaded them already (training tokenizes its data first), so nothing is loaded twice."""
        backbone, tokenizer = loaded or load_backbone(
            recipe.backbone.name, recipe.backbone.attention_dropout, recipe.backbone.hidden_dropout
        )
        if recipe.backbone.gradient_checkpointing:
            backbone.gradient_checkpointing_enable()
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
        if settings.finetune == "lora":
            backbone = _wrap_lora(backbone, settings.lora, adapter_dir, getattr(strategy, "lora_modules_to_save", ()))
        elif settings.finetune == "frozen":
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
        return self.settings.problem_type == "multi_label"

    @property
    def frozen(self) -> bool:
        return self.settings.finetune == "frozen"

    def train(self, mode: bool = True):
        super().train(mode)
        if self.frozen:
            self.backbone.eval()  # a frozen backbone never uses dropout: its cached embeddings stay valid
        return self

    def encode(self, documents: list[torch.Tensor]) -> Units:
        """Run the backbone through the strategy: B documents -> Units (B, N, H)."""
        return self.strategy.encode(self.backbone, documents)

    def forward(self, documents: list[torch.Tensor] | None = None, units: Units | None = None) -> ClassifierOutput:
        if units is None:
            units = self.encode(documents)
        pooled: Pooled = self.strategy.pool(units)  # (B, H)
        logits = self.head(self.dropout(pooled.vector))  # (B, C)
        return ClassifierOutput(logits, pooled.weights, units.mask)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, class_weights: torch.Tensor | None = None) -> torch.Tensor:
        """logits (B, C), labels (B,) or (B, C) multi-hot -> the mean loss. `class_weights` (C,): cross-entropy class
        weights (a weighted mean over documents), or for multi-label the pos_weight of each label."""
        if class_weights is not None:
            class_weights = class_weights.to(logits.device, torch.float32)
        if self.multi_label:
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float(), pos_weight=class_weights)
        return nn.functional.cross_entropy(logits.float(), labels, weight=class_weights)

    @property
    def thresholds(self) -> list[float]:
        """The multi-label decision threshold of each label (0.5 unless tuned or set)."""
        return self.settings.thresholds or [0.5] * len(self.label_names)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits.float()) if self.multi_label else logits.float().softmax(-1)

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        """Texts -> ((T,) content-id tensors cut at max_document_tokens, full lengths with [CLS]/[SEP])."""
        from longbert.data.documents import tokenize_documents

        ids, lengths = tokenize_documents(self.tokenizer, texts, self.settings.max_document_tokens)
        return [torch.tensor(d, dtype=torch.long) for d in ids], lengths

    def predict(self, texts: list[str], batch_size: int = 16, precision: str = "auto") -> list[dict]:
        """Texts -> one dict each, in the order of `texts`: {'label': name (or 'labels': [names] for multi-label),
        'probabilities': {name: p}, 'n_tokens': the text's full length with [CLS]/[SEP] (over max_document_tokens + 2:
        the text was cut)}. `precision`: fp32, bf16, or auto (bf16 where the model's device runs it fast)."""
        rows: list = [None] * len(texts)
        for index, row in self.predictions_as_done(texts, batch_size, precision):
            rows[index] = row
        return rows

    def predictions_as_done(self, texts: list[str], batch_size: int = 16,
                            precision: str = "auto") -> Iterator[tuple[int, dict]]:
        """(index into `texts`, the row `predict` gives it) for every text, batch by batch as each is computed.
        All texts are tokenized first and batched by length, longest first, so that a batch pads little and the
        biggest batch comes first; hence rows arrive out of order."""
        check_texts(texts)
        if batch_size < 1:
            raise LongbertError(f"batch_size must be >= 1, got {batch_size}")
        autocast = autocast_for(self, precision)
        documents, lengths = self.tokenize(texts)
        order = sorted(range(len(texts)), key=lambda i: len(documents[i]), reverse=True)
        was_training = self.training
        self.eval()
        try:
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                with torch.no_grad(), autocast:
                    probabilities = self.probabilities(self([documents[i] for i in batch]).logits)  # (B, C)
                for index, p in zip(batch, probabilities.tolist()):
                    yield index, prediction_row(self.settings, p, lengths[index])
        finally:
            self.train(was_training)

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
        packaged MiniLM or a hub model is named instead (see `backbone.portable_reference`)."""
        from safetensors.torch import save_file

        from longbert.modeling.card import write_card
        from longbert.hf.config import LongbertConfig

        reference = portable_reference(self.settings.backbone)
        settings = dataclasses.replace(self.settings, backbone=reference or SAVED_IN_FOLDER)
        with atomic_folder(directory) as staging:
            if self.settings.finetune == "full" or reference is None:
                self.plain_backbone().save_pretrained(staging / BACKBONE_DIR, safe_serialization=True)
            if self.settings.finetune == "lora":
                # longbert never resizes the vocabulary: no embedding layers to save, and no look-up of the base model
                # on the hub to find out (peft's "auto")
                self.backbone.save_pretrained(staging / ADAPTER_DIR, save_embedding_layers=False)
                _make_adapter_portable(staging / ADAPTER_DIR, reference)
            self.tokenizer.save_pretrained(staging)
            save_file(self.head_state(), staging / HEAD_FILE)
            (staging / CONFIG_FILE).write_text(json.dumps(settings.to_dict(), indent=2))
            LongbertConfig.from_settings(settings).save_pretrained(staging)
            write_card(staging, settings, self.backbone.config, self.training_facts)

    def plain_backbone(self):
        """The encoder as transformers saves it: without LoRA's layers (a copy; LoRA leaves the weights it wraps as
        they were)."""
        if self.settings.finetune != "lora":
            return self.backbone
        return copy.deepcopy(self.backbone).unload()

    def push_to_hub(self, repo_id: str, private: bool | None = None, token: str | bool | None = None,
                    commit_message: str | None = None, revision: str | None = None, create_pr: bool = False):
        """Upload this model, saved as `save_pretrained` writes it, to hub repository `repo_id` (see
        `longbert.hf.hub.push_to_hub`); `from_pretrained(repo_id)` loads it back."""
        from longbert.hf.hub import push_to_hub

        return push_to_hub(self, repo_id, private=private, token=token, commit_message=commit_message,
                           revision=revision, create_pr=create_pr)

    @classmethod
    def from_pretrained(cls, directory: str | Path, **hub_options) -> "LongDocumentClassifier":
        """Load a folder written by `save_pretrained` (or a run folder's `best/` model), or a model on the hub by its
        id ('user/name'; `hub_options` as `longbert.hf.hub.download` takes them: revision, cache_dir, token,
        local_files_only, force_download). A damaged or incomplete folder raises one LongbertError line naming the
        file and what is wrong with it."""
        from longbert.modeling.card import FACTS_FILE, TrainingFacts
        from longbert.hf.hub import download, is_hub_id

        directory = Path(directory).expanduser()
        if not directory.exists() and is_hub_id(str(directory)):
            directory = download(str(directory), **hub_options)
        if (directory / "best" / CONFIG_FILE).is_file():
            directory = directory / "best"  # a run folder: use its kept model
        if not (directory / CONFIG_FILE).is_file():
            raise LongbertError(f"{directory} is not a longbert model folder (no {CONFIG_FILE})")
        settings = ModelSettings.from_file(directory / CONFIG_FILE)
        backbone_saved = settings.finetune == "full" or settings.backbone == SAVED_IN_FOLDER
        needed = {HEAD_FILE: f"finetune is {settings.finetune}"}
        if backbone_saved:
            needed[BACKBONE_DIR] = ("finetune is full" if settings.finetune == "full"
                                    else f"{CONFIG_FILE} says the backbone is saved in the folder")
        if settings.finetune == "lora":
            needed[ADAPTER_DIR] = "finetune is lora"
        for name, why in needed.items():
            if not (directory / name).exists():
                raise LongbertError(f"{directory} is incomplete: no {name} ({why})")
        if backbone_saved:
            backbone = load_encoder(str(directory / BACKBONE_DIR))
        else:  # the packaged MiniLM or a hub id (or, in folders saved before longbert kept them, a local path)
            backbone = load_encoder(settings.backbone, settings.attention_dropout, settings.hidden_dropout)
        tokenizer = load_tokenizer(directory)
        model = cls._assemble(backbone, tokenizer, settings,
                              adapter_dir=directory / ADAPTER_DIR if settings.finetune == "lora" else None)
        try:
            model.load_head_state(_read_head_file(directory / HEAD_FILE))
        except RuntimeError as error:  # torch's report of missing, unexpected or misshapen tensors
            raise LongbertError(f"{directory / HEAD_FILE} does not fit the model in {CONFIG_FILE}: "
                                f"{' '.join(str(error).split())}") from None
        if (directory / FACTS_FILE).is_file():
            model.training_facts = TrainingFacts.from_file(directory / FACTS_FILE)
        model.eval()
        return model


def check_texts(texts: list) -> None:
    """What `predict` accepts: every text a string with something in it (a LongbertError naming the first that is not)."""
    for row, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise LongbertError(f"text {row} is empty or whitespace-only")


def prediction_row(settings: ModelSettings, probabilities: list[float], n_tokens: int) -> dict:
    """One text's class probabilities and full length -> `predict`'s row: {'label' (or 'labels', decided at the
    settings' thresholds), 'probabilities': {name: p}, 'n_tokens'}. Shared by every way of running a model."""
    names = settings.label_names
    row = {"probabilities": dict(zip(names, probabilities))}
    if settings.problem_type == "multi_label":
        thresholds = settings.thresholds or [0.5] * len(names)
        row["labels"] = [n for n, q, t in zip(names, probabilities, thresholds) if q >= t]
    else:
        row["label"] = names[max(range(len(probabilities)), key=probabilities.__getitem__)]
    row["n_tokens"] = n_tokens
    return row


def prediction_rows(settings: ModelSettings, probabilities: torch.Tensor, lengths: list[int]) -> list[dict]:
    """(B, C) probabilities and each text's full length -> B rows (`prediction_row`)."""
    return [prediction_row(settings, p, n) for p, n in zip(probabilities.tolist(), lengths)]


def _make_adapter_portable(adapter_dir: Path, reference: str | None) -> None:
    """peft writes the base model's path on this machine into adapter_config.json and a template README.md: name it
    by its hub id instead (None when it is saved in the model folder) and leave the card to the model folder's."""
    config_path = adapter_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = MINILM_HUB_ID if reference == MINILM else reference
    config_path.write_text(json.dumps(config, indent=2))
    (adapter_dir / "README.md").unlink(missing_ok=True)


def _read_head_file(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except SafetensorError as error:
        raise LongbertError(f"{path} is damaged (truncated or not safetensors): {error}") from None


def _wrap_lora(backbone, lora: LoraConfig, adapter_dir: Path | None, modules_to_save: tuple[str, ...] = ()):
    """peft's LoRA around the backbone: fresh adapters, or the saved ones in `adapter_dir` (peft's adapter folders
    hold weights and a JSON config only; no code is loaded from them). `modules_to_save`: backbone modules that
    train in full beside the adapters (peft keeps a trainable copy and saves it with the adapter)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import PeftModel, get_peft_model

    if adapter_dir is not None:
        with clear_load_errors(str(adapter_dir), str(adapter_dir), kind="LoRA adapter"):
            return PeftModel.from_pretrained(backbone, str(adapter_dir), is_trainable=True)
    targets = default_lora_targets(backbone.config) if lora.target_modules is None else list(lora.target_modules)
    names = {name.rsplit(".", 1)[-1] for name, _ in backbone.named_modules()}
    missing = [t for t in targets if t not in names]
    if missing:
        raise LongbertError(f"model.lora.target_modules: the backbone has no module named {missing[0]!r} "
                            f"({type(backbone).__name__}; null picks its attention query/value projections)")
    config = PeftLoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                            modules_to_save=list(modules_to_save) or None)
    return get_peft_model(backbone, config)
