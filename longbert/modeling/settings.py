"""What a saved model folder is made of: the names of its files and `ModelSettings`, its longbert_config.json.

A leaf of modeling/: the classifier, the folder reader and writer, and the model card all import it, and it imports
none of them, so they never import each other to learn a file name.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from longbert.config import (
    FINETUNE_MODES,
    PROBLEM_TYPES,
    SINGLE_LABEL,
    FinetuneChoice,
    FinetuneMode,
    LoraConfig,
    ProblemType,
    build,
    is_multi_label,
)
from longbert.errors import LongbertError
from longbert.modeling.calibration import LOG_TEMPERATURE_BOUNDS
from longbert.strategies.base import PassBudget
from longbert.strategies.configs import STRATEGIES
from longbert.utils.fields import one_of, option

# transformers' own config file (transformers.utils.CONFIG_NAME), named here so that reading a name loads no
# transformers; a test holds the two equal.
FORMAT_VERSION = 1


@dataclass
class ModelSettings(FinetuneChoice):
    """Everything `from_pretrained` needs to rebuild a model: written as longbert_config.json, read back through
    the same validation as recipes (`config.build`), and every key must be there (nothing is silently defaulted)."""

    format: int = option(FORMAT_VERSION, "longbert's model folder format")
    backbone: str = option("minilm", "the backbone as the recipe named it; in a saved folder `minilm` or a hub id "
                                     "(loaded again when its weights are not saved), or `backbone/` (saved in the "
                                     "folder)")
    attention_dropout: float | None = option(None, "attention_probs_dropout_prob override; null keeps the model's")
    hidden_dropout: float | None = option(None, "hidden_dropout_prob override; null keeps the model's")
    budget: PassBudget = option(None, "how much goes through the backbone in one pass", default_factory=PassBudget)
    strategy: Any = option(None, "the strategy's settings; `name` picks it")
    problem_type: ProblemType = option(SINGLE_LABEL, "single_label or multi_label")
    finetune: FinetuneMode = option("full", "full, lora or frozen")
    classifier_dropout: float = option(0.1, "dropout before the classification head")
    lora: LoraConfig = option(None, "LoRA settings, used when finetune is lora", default_factory=LoraConfig)
    max_document_tokens: int = option(16384, "per-document token cap applied when tokenizing texts")
    label_names: list[str] = option([], "class names in index order")
    thresholds: list[float] | None = option(None, "multi-label decision threshold per label (tuned on validation or "
                                                  "set by the recipe); null, or absent from the file (as before it "
                                                  "existed): 0.5. With `temperatures`, they apply to the calibrated "
                                                  "probabilities")
    temperatures: list[float] | None = option(None, "calibration: the logits are divided by this temperature (one; "
                                                    "multi-label: one per label) before softmax or sigmoid, fitted "
                                                    "on validation (longbert.modeling.calibration); null, or "
                                                    "absent from the file (as before it existed): none")

    @classmethod
    def from_recipe(cls, recipe, label_names: list[str]) -> ModelSettings:
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
        out = (one_of("problem_type", self.problem_type, PROBLEM_TYPES)
               + one_of("finetune", self.finetune, FINETUNE_MODES))
        for name in ("attention_dropout", "hidden_dropout", "classifier_dropout"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < 1:
                out.append(f"{name} must be in [0, 1), got {value}")
        for name, value in (("budget.max_windows", self.budget.max_windows),
                            ("budget.max_tokens", self.budget.max_tokens),
                            ("max_document_tokens", self.max_document_tokens)):
            if value is not None and value < 1:
                out.append(f"{name} must be >= 1, got {value}")
        if self.budget.max_padding is not None and not 0 <= self.budget.max_padding <= 1:
            out.append(f"budget.max_padding must be in [0, 1], got {self.budget.max_padding}")
        if not self.label_names or len(set(self.label_names)) != len(self.label_names):
            out.append(f"label_names must name each class once, got {self.label_names}")
        if self.thresholds is not None and (len(self.thresholds) != len(self.label_names)
                                            or not all(0 < t < 1 for t in self.thresholds)):
            out.append(f"thresholds must hold one number in (0, 1) per label, got {self.thresholds}")
        wanted = len(self.label_names) if is_multi_label(self.problem_type) else 1
        low, high = (math.exp(b) for b in LOG_TEMPERATURE_BOUNDS)
        if self.temperatures is not None and (len(self.temperatures) != wanted or not all(
                isinstance(t, (int, float)) and not isinstance(t, bool) and low * (1 - 1e-9) <= t <= high * (1 + 1e-9)
                for t in self.temperatures)):
            out.append(f"temperatures must hold {wanted} number(s) between {low:.4g} and {high:.4g}, the range "
                       f"calibration fits in (one{' per label' if wanted > 1 else ''}), got {self.temperatures}")
        return out

    def without_calibration(self) -> ModelSettings:
        """These settings with the calibration taken off: no temperatures, and multi-label thresholds moved to where
        they make the same decisions on the uncalibrated probabilities (a temperature keeps the order of a label's
        probabilities, so threshold t on calibrated ones is sigmoid(T * logit(t)) on uncalibrated ones)."""
        if self.temperatures is None:
            return copy.deepcopy(self)
        thresholds = self.thresholds
        if thresholds is not None:
            thresholds = [1 / (1 + math.exp(-t_label * math.log(t / (1 - t))))
                          for t, t_label in zip(thresholds, self.temperatures)]
        return dataclasses.replace(copy.deepcopy(self), temperatures=None, thresholds=thresholds)

    def to_dict(self) -> dict:
        raw = dataclasses.asdict(self)
        for key in ("thresholds", "temperatures"):  # format 1 files from before these existed hold none
            if raw[key] is None:
                del raw[key]
        return raw

    @classmethod
    def from_dict(cls, raw: Any, source: str) -> ModelSettings:
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
            raise LongbertError(f"{source}: {detail}" if len(problems) == 1
                                else f"{source} has {len(problems)} problems: {detail}")
        return settings

    @classmethod
    def from_file(cls, path: Path) -> ModelSettings:
        """Read and validate a saved longbert_config.json (see `from_dict`)."""
        try:
            raw = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise LongbertError(f"{path} is damaged: {error}") from None
        return cls.from_dict(raw, str(path))


def _with_absent_means(raw: dict) -> dict:
    """A saved strategy section from before a setting existed: the setting takes the value that reproduces how that
    model was trained (the strategy config's ABSENT_MEANS, e.g. chunk's unit_weights: equal), not today's default."""
    section = raw.get("strategy")
    info = STRATEGIES.get(section.get("name")) if isinstance(section, dict) else None
    absent = getattr(info.config_cls, "ABSENT_MEANS", {}) if info is not None else {}
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
