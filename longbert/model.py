"""LongDocumentClassifier: a BERT-family backbone + a long-document strategy + a classification head.

Saved in the Hugging Face style, without pickle:
    <dir>/longbert_config.json   strategy, labels, problem type, backbone reference, fine-tuning mode
    <dir>/head.safetensors       the strategy's own weights (poolers) and the classification head
    <dir>/backbone/              full fine-tuning: the fine-tuned encoder (safetensors + config)
    <dir>/adapter/               LoRA: the peft adapter (adapter_model.safetensors + adapter_config.json)
    <dir>/tokenizer files        the tokenizer
A frozen backbone is not saved: the config's backbone reference is loaded again.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from longbert.atomic import atomic_folder
from longbert.backbone import load_backbone, prepare_tokenizer
from longbert.errors import LongbertError
from longbert.hardware import autocast_for
from longbert.strategies.base import PassBudget, Pooled, SpecialTokens, Units, build_strategy, get_entry

CONFIG_FILE = "longbert_config.json"
HEAD_FILE = "head.safetensors"
FORMAT_VERSION = 1


@dataclass
class ClassifierOutput:
    logits: torch.Tensor  # (B, C)
    unit_weights: torch.Tensor | None = None  # (B, N): how much each chunk/window counted, when known
    unit_mask: torch.Tensor | None = None  # (B, N) bool: which units exist


class LongDocumentClassifier(nn.Module):
    """Classify whole documents. `forward` takes a list of (T,) token-id tensors (content tokens, no special
    tokens) or precomputed `Units`, and returns (B, C) logits."""

    def __init__(self, backbone, tokenizer, strategy, label_names, settings: dict):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = prepare_tokenizer(tokenizer)
        self.strategy = strategy
        self.label_names = list(label_names)
        self.settings = settings  # everything save/load needs to rebuild this object
        hidden = backbone.config.hidden_size
        self.dropout = nn.Dropout(settings["classifier_dropout"])
        self.head = nn.Linear(hidden, len(self.label_names))

    # -- building ---------------------------------------------------------------------------------------------

    @classmethod
    def from_recipe(cls, recipe, label_names: list[str], loaded: tuple | None = None) -> "LongDocumentClassifier":
        """A fresh model for `recipe` (backbone weights loaded, strategy and head initialised from the seed).
        `loaded`: the (backbone, tokenizer) pair that `load_backbone(recipe.backbone...)` returned, when the caller
        has loaded them already (training tokenizes its data first), so nothing is loaded twice."""
        settings = {
            "format": FORMAT_VERSION,
            "backbone": recipe.backbone.name,
            "attention_dropout": recipe.backbone.attention_dropout,
            "hidden_dropout": recipe.backbone.hidden_dropout,
            "budget": dataclasses.asdict(recipe.backbone.budget),
            "strategy": dataclasses.asdict(recipe.strategy),
            "problem_type": recipe.model.problem_type,
            "finetune": recipe.model.finetune,
            "classifier_dropout": recipe.model.classifier_dropout,
            "lora": dataclasses.asdict(recipe.model.lora),
            "max_document_tokens": recipe.data.max_document_tokens,
        }
        backbone, tokenizer = loaded or load_backbone(
            recipe.backbone.name, recipe.backbone.attention_dropout, recipe.backbone.hidden_dropout
        )
        if recipe.backbone.gradient_checkpointing:
            backbone.gradient_checkpointing_enable()
        return cls._assemble(backbone, tokenizer, label_names, settings, adapter_dir=None)

    @classmethod
    def _assemble(cls, backbone, tokenizer, label_names, settings, adapter_dir):
        entry = get_entry(settings["strategy"]["name"])
        strategy_config = entry.config_cls(**settings["strategy"])
        special = SpecialTokens.from_tokenizer(tokenizer)
        strategy = build_strategy(strategy_config, backbone.config.hidden_size, special, PassBudget(**settings["budget"]))
        strategy.adapt_backbone(backbone)
        mode = settings["finetune"]
        if mode == "lora":
            backbone = _wrap_lora(backbone, settings["lora"], adapter_dir)
        elif mode == "frozen":
            backbone.requires_grad_(False)
        return cls(backbone, tokenizer, strategy, label_names, settings)

    # -- running ----------------------------------------------------------------------------------------------

    @property
    def multi_label(self) -> bool:
        return self.settings["problem_type"] == "multi_label"

    @property
    def frozen(self) -> bool:
        return self.settings["finetune"] == "frozen"

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

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.multi_label:
            return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
        return nn.functional.cross_entropy(logits.float(), labels)

    def probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits.float()) if self.multi_label else logits.float().softmax(-1)

    def tokenize(self, texts: list[str]) -> tuple[list[torch.Tensor], list[int]]:
        """Texts -> ((T,) content-id tensors cut at max_document_tokens, full lengths with [CLS]/[SEP])."""
        from longbert.data import tokenize_documents

        ids, lengths = tokenize_documents(self.tokenizer, texts, self.settings["max_document_tokens"])
        return [torch.tensor(d, dtype=torch.long) for d in ids], lengths

    @torch.no_grad()
    def predict(self, texts: list[str], batch_size: int = 16) -> list[dict]:
        """Texts -> one dict each: {'label': name (or 'labels': [names] for multi-label), 'probabilities': {name: p},
        'n_tokens': the text's full length with [CLS]/[SEP] (over max_document_tokens + 2: the text was cut)}."""
        for row, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise LongbertError(f"text {row} is empty or whitespace-only")
        was_training = self.training
        self.eval()
        results = []
        try:
            for start in range(0, len(texts), batch_size):
                documents, lengths = self.tokenize(texts[start : start + batch_size])
                with autocast_for(self):
                    probabilities = self.probabilities(self(documents).logits)  # (B, C)
                for p, n_tokens in zip(probabilities.tolist(), lengths):
                    result = {"probabilities": dict(zip(self.label_names, p))}
                    if self.multi_label:
                        result["labels"] = [n for n, q in zip(self.label_names, p) if q >= 0.5]
                    else:
                        result["label"] = self.label_names[max(range(len(p)), key=p.__getitem__)]
                    result["n_tokens"] = n_tokens
                    results.append(result)
        finally:
            self.train(was_training)
        return results

    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    # -- saving and loading -----------------------------------------------------------------------------------

    def head_state(self) -> dict[str, torch.Tensor]:
        """Everything outside the backbone: the strategy's weights and the classification head."""
        state = {f"strategy.{k}": v for k, v in self.strategy.state_dict().items()}
        state.update({f"head.{k}": v for k, v in self.head.state_dict().items()})
        return {k: v.detach().contiguous().cpu() for k, v in state.items()}

    def load_head_state(self, state: dict[str, torch.Tensor]) -> None:
        self.strategy.load_state_dict({k[9:]: v for k, v in state.items() if k.startswith("strategy.")})
        self.head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})

    def save_pretrained(self, directory: str | Path) -> None:
        """Write the model folder atomically: it appears complete or not at all."""
        from safetensors.torch import save_file

        with atomic_folder(directory) as staging:
            mode = self.settings["finetune"]
            if mode == "full":
                self.backbone.save_pretrained(staging / "backbone", safe_serialization=True)
            elif mode == "lora":
                self.backbone.save_pretrained(staging / "adapter")
            self.tokenizer.save_pretrained(staging)
            save_file(self.head_state(), staging / HEAD_FILE)
            config = dict(self.settings, label_names=self.label_names)
            (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2))

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> "LongDocumentClassifier":
        """Load a folder written by `save_pretrained` (or a run folder's `best/` model)."""
        from safetensors.torch import load_file
        from transformers import AutoTokenizer

        directory = Path(directory)
        if (directory / "best" / CONFIG_FILE).is_file():
            directory = directory / "best"  # a run folder: use its kept model
        if not (directory / CONFIG_FILE).is_file():
            raise LongbertError(f"{directory} is not a longbert model folder (no {CONFIG_FILE})")
        try:
            settings = json.loads((directory / CONFIG_FILE).read_text())
            label_names = settings.pop("label_names")
        except (json.JSONDecodeError, KeyError) as error:
            raise LongbertError(f"{directory / CONFIG_FILE} is damaged: {error}") from None
        if settings.get("format") != FORMAT_VERSION:
            raise LongbertError(f"{directory} was written by another longbert format ({settings.get('format')})")
        if settings["finetune"] == "full":
            backbone, _ = load_backbone(str(directory / "backbone"))
        else:
            backbone, _ = load_backbone(settings["backbone"], settings["attention_dropout"], settings["hidden_dropout"])
        tokenizer = AutoTokenizer.from_pretrained(directory)
        adapter = directory / "adapter" if settings["finetune"] == "lora" else None
        model = cls._assemble(backbone, tokenizer, label_names, settings, adapter_dir=adapter)
        model.load_head_state(load_file(directory / HEAD_FILE))
        model.eval()
        return model


def _wrap_lora(backbone, lora: dict, adapter_dir: Path | None):
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(backbone, str(adapter_dir), is_trainable=True)
    names = {name.rsplit(".", 1)[-1] for name, _ in backbone.named_modules()}
    missing = [t for t in lora["target_modules"] if t not in names]
    if missing:
        raise LongbertError(f"model.lora.target_modules: the backbone has no module named {missing[0]!r}")
    config = LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                        target_modules=list(lora["target_modules"]))
    return get_peft_model(backbone, config)
