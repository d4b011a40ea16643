"""A model folder on disk: writing its pieces, finding and checking them, reading them back; LoRA through peft.

Saved in the Hugging Face style, without pickle:
    <dir>/longbert_config.json   ModelSettings: strategy, labels, problem type, backbone reference, fine-tuning mode
                                 (the source of truth)
    <dir>/config.json            what transformers reads (model type "longbert", labels; modeling/hf_config.py)
    <dir>/head.safetensors       the strategy's own weights (poolers) and the classification head
    <dir>/backbone/              the encoder (safetensors + config): the fine-tuned one, or in frozen and LoRA mode
                                 the one they started from when it came from a local folder
    <dir>/adapter/               LoRA: the peft adapter (adapter_model.safetensors + adapter_config.json)
    <dir>/tokenizer files        the tokenizer
    <dir>/lexical.safetensors, lexical.json   a hybrid model's TF-IDF half (longbert.modeling.lexical), if any
    <dir>/README.md              the model card (longbert.modeling.card), and training.json, what its training run knew
A folder is self-contained: a frozen or LoRA backbone that is not in it is the packaged MiniLM or a hub model, named
in longbert_config.json; no path of the machine that saved it is written, so it can be moved or uploaded as it is.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from longbert.config import LoraConfig, is_multi_label
from longbert.errors import LongbertError
from longbert.modeling.backbone import (
    MINILM,
    MINILM_HUB_ID,
    SAVED_IN_FOLDER,
    clear_load_errors,
    default_lora_targets,
    load_encoder,
    load_tokenizer,
    portable_reference,
    refuse_pickle_weights,
)
from longbert.modeling.card import TrainingFacts, write_card
from longbert.modeling.hf_config import LongbertConfig
from longbert.modeling.hub import download, is_hub_id
from longbert.modeling.lexical import LexicalModel
from longbert.modeling.settings import ModelSettings
from longbert.utils.atomic import json_text
from longbert.utils.folders import (
    ADAPTER_DIR,
    BACKBONE_DIR,
    BEST,
    CONFIG_FILE,
    ENSEMBLE_FILE,
    EXPORT_FILE,
    FACTS_FILE,
    HEAD_FILE,
    LEXICAL_DIR,
    MEMBERS_DIR,
)
from longbert.utils.outputs import atomic_folder

if TYPE_CHECKING:
    from longbert.modeling.classifier import LongDocumentClassifier


def save_model_folder(model: LongDocumentClassifier, directory: str | Path) -> None:
    """Write `model`'s folder atomically: it appears complete or not at all. The backbone's weights go in it
    (backbone/) when they were fine-tuned or came from a local folder; a frozen or LoRA backbone that is the
    packaged MiniLM or a hub model is named instead (see `backbone.portable_reference`). An existing `directory` is
    replaced only when it is empty or an earlier model folder (it holds longbert_config.json); a folder of other
    files is one LongbertError line, left as it was."""
    # A backbone whose weights are not its name's (train.init_from loaded trained ones) is saved, whatever the mode.
    reference = None if model.backbone_weights_changed else portable_reference(model.settings.backbone)
    settings = dataclasses.replace(model.settings, backbone=reference or SAVED_IN_FOLDER)
    # A folder holding other files than an earlier model's is refused, not replaced with all it holds.
    with atomic_folder(directory, CONFIG_FILE, "model folder") as staging:
        if model.settings.trains_whole_backbone or reference is None:
            model.plain_backbone().save_pretrained(staging / BACKBONE_DIR, safe_serialization=True)
        if model.settings.trains_lora:
            # longbert never resizes the vocabulary: no embedding layers to save, and no look-up of the base model
            # on the hub to find out (peft's "auto")
            model.backbone.save_pretrained(staging / ADAPTER_DIR, save_embedding_layers=False)
            make_adapter_portable(staging / ADAPTER_DIR, reference)
        model.tokenizer.save_pretrained(staging)
        save_file(model.head_state(), staging / HEAD_FILE)
        (staging / CONFIG_FILE).write_text(json_text(settings.to_dict(), CONFIG_FILE, indent=2))
        LongbertConfig.from_settings(settings).save_pretrained(staging)
        if model.lexical is not None:
            model.lexical.save(staging)
        if model.ensemble is not None:
            save_ensemble(model, staging)
        write_card(staging, settings, model.backbone.config, model.training_facts, model.lexical, model.ensemble)


def save_ensemble(model: LongDocumentClassifier, staging: Path) -> None:
    """Write an ensemble's other members (each a model folder of its own), its TF-IDF half for a hybrid ensemble, and
    its facts into the model folder being written in `staging` (longbert.modeling.ensemble says what they are)."""
    for number, member in enumerate(model.ensemble.others, start=1):
        save_model_folder(member, staging / MEMBERS_DIR / str(number))
    if model.ensemble.lexical is not None:
        (staging / LEXICAL_DIR).mkdir()
        model.ensemble.lexical.save(staging / LEXICAL_DIR)
    (staging / ENSEMBLE_FILE).write_text(json_text(dataclasses.asdict(model.ensemble.facts), ENSEMBLE_FILE, indent=2))


def open_model_folder(directory: str | Path, **hub_options) -> tuple[Path, ModelSettings]:
    """(the model folder, its validated settings) for a folder written by `save_model_folder`, a run folder (its
    `best/` model), or a hub id ('user/name', downloaded with `hub_options`, see `longbert.modeling.hub.download`).
    A folder that is not a model's, or lacks a piece its settings need, raises one LongbertError line."""
    directory = Path(directory).expanduser()
    if not directory.exists() and is_hub_id(str(directory)):
        directory = download(str(directory), **hub_options)
    if (directory / BEST / CONFIG_FILE).is_file():
        directory = directory / BEST  # a run folder: use its kept model
    if not (directory / CONFIG_FILE).is_file():
        onnx = sorted(p.name for p in directory.glob("*.onnx")) if directory.is_dir() else []
        if onnx:  # an exported folder that lost its description: once "no longbert_config.json", the wrong file
            raise LongbertError(f"{directory} holds {onnx[0]} but no {EXPORT_FILE}, which an exported folder needs; "
                                "export the model again")
        raise LongbertError(f"{directory} is not a longbert model folder (no {CONFIG_FILE})")
    settings = ModelSettings.from_file(directory / CONFIG_FILE)
    needed = {HEAD_FILE: f"finetune is {settings.finetune}"}
    if backbone_is_saved(settings):
        needed[BACKBONE_DIR] = ("finetune is full" if settings.trains_whole_backbone
                                else f"{CONFIG_FILE} says the backbone is saved in the folder")
    if settings.trains_lora:
        needed[ADAPTER_DIR] = "finetune is lora"
    for name, why in needed.items():
        if not (directory / name).exists():
            raise LongbertError(f"{directory} is incomplete: no {name} ({why})")
    return directory, settings


def backbone_is_saved(settings: ModelSettings) -> bool:
    """Whether a folder with these settings holds its backbone's weights in backbone/."""
    return settings.trains_whole_backbone or settings.backbone == SAVED_IN_FOLDER


def load_folder_backbone(directory: Path, settings: ModelSettings):
    """(the encoder, without LoRA, and the tokenizer) of the model folder `directory`."""
    if backbone_is_saved(settings):
        backbone = load_encoder(str(directory / BACKBONE_DIR))
    else:  # the packaged MiniLM or a hub id (or, in folders saved before longbert kept them, a local path)
        backbone = load_encoder(settings.backbone, settings.attention_dropout, settings.hidden_dropout)
    return backbone, load_tokenizer(directory)


def adapter_of(directory: Path, settings: ModelSettings) -> Path | None:
    """The saved LoRA adapter folder of a model folder, or None when it was not fine-tuned with LoRA."""
    return directory / ADAPTER_DIR if settings.trains_lora else None


def load_folder_head(model: LongDocumentClassifier, directory: Path) -> None:
    """Load head.safetensors into `model` (built from the folder's settings); a file that does not fit it raises one
    LongbertError line naming the tensors."""
    try:
        model.load_head_state(read_head_file(directory / HEAD_FILE))
    except RuntimeError as error:  # torch's report of missing, unexpected or misshapen tensors
        raise LongbertError(f"{directory / HEAD_FILE} does not fit the model in {CONFIG_FILE}: "
                            f"{' '.join(str(error).split())}") from None


def load_folder_lexical(directory: Path, settings: ModelSettings, vocab_size: int):
    """The TF-IDF half of a hybrid model folder (`LexicalModel`), or None for a plain model."""
    lexical = LexicalModel.load(directory, vocab_size)
    if lexical is not None and is_multi_label(settings.problem_type):
        raise LongbertError(f"{directory} holds a TF-IDF half, but hybrid models are single-label only and "
                            f"{CONFIG_FILE} says multi_label")
    return lexical


def read_training_facts(directory: Path) -> TrainingFacts | None:
    """What the training run of the model in `directory` knew (training.json), or None for a model built otherwise."""
    return TrainingFacts.from_file(directory / FACTS_FILE) if (directory / FACTS_FILE).is_file() else None


def read_head_file(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a head.safetensors file; a damaged file raises one LongbertError line."""
    try:
        return load_file(path)
    except SafetensorError as error:
        raise LongbertError(f"{path} is damaged (truncated or not safetensors): {error}") from None


def make_adapter_portable(adapter_dir: Path, reference: str | None) -> None:
    """peft writes the base model's path on this machine into adapter_config.json and a template README.md: name it
    by its hub id instead (None when it is saved in the model folder) and leave the card to the model folder's."""
    config_path = adapter_dir / "adapter_config.json"
    config = json.loads(config_path.read_text())
    config["base_model_name_or_path"] = MINILM_HUB_ID if reference == MINILM else reference
    config_path.write_text(json.dumps(config, indent=2))
    (adapter_dir / "README.md").unlink(missing_ok=True)


def wrap_lora(backbone, lora: LoraConfig, adapter_dir: Path | None, modules_to_save: tuple[str, ...] = ()):
    """peft's LoRA around the backbone: fresh adapters, or the saved ones in `adapter_dir` (peft's adapter folders
    hold weights and a JSON config only; no code is loaded from them). `modules_to_save`: backbone modules that
    train in full beside the adapters (peft keeps a trainable copy and saves it with the adapter)."""
    if adapter_dir is not None:
        refuse_pickle_weights(adapter_dir, ("adapter_model.safetensors",))
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
