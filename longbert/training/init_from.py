"""`train.init_from`: a fine-tuning run that starts from an earlier model's weights instead of its backbone's own.

    source = open_init_from(recipe)          # before the run folder is touched: every problem is one error line
    model, report = build_model(recipe, label_names, (backbone, tokenizer), source)

The earlier model (a run folder's best/, or any folder `LongDocumentClassifier.from_pretrained` loads) is loaded
whole; LoRA adapters it was saved with are merged into its backbone (peft's merge_and_unload). Its backbone tensors
go into the new backbone where name and shape match, twice: before the new strategy adapts the backbone (so bigbird
extends the earlier position table) and after it (what fits only then: an earlier bigbird's extended table). Then
the strategy's tensors (poolers) and the head's, where name and shape match. Every other tensor keeps its new
initialisation and is named in the report. A new LoRA run gets its adapters after the loading, on the loaded base.

A resumed run builds its model the same way and `load_checkpoint` then loads the checkpoint over it: the checkpoint
wins, and frozen and LoRA runs, whose checkpoints hold no backbone weights, keep the backbone loaded here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig

from longbert.errors import LongbertError
from longbert.modeling.backbone import clear_load_errors, resolve_backbone
from longbert.modeling.classifier import LongDocumentClassifier
from longbert.modeling.ensemble import refuse_ensemble
from longbert.modeling.model_folder import backbone_is_saved, open_model_folder, wrap_lora
from longbert.strategies.base import lora_modules_to_save
from longbert.utils.folders import BACKBONE_DIR, BEST, CONFIG_FILE

FIELD = "train.init_from"
# What a backbone's weights must agree on to start another: (config attribute, how the error names it).
ARCHITECTURE = (("model_type", "model type"), ("hidden_size", "hidden size"), ("vocab_size", "vocabulary size"))


@dataclass
class InitSource:
    path: str  # train.init_from as the recipe gives it
    folder: Path  # the model folder it names (a run folder's best/)
    settings: object  # that folder's ModelSettings
    # Whether its pooler and head were trained (a contrastive stage's were not): a run starting from trained ones
    # validates them at step 0 as a candidate to keep.
    head_trained: bool = True
    # A start an earlier stage of this run trained, held in memory (`in_memory`): (backbone tensors, strategy and
    # head tensors, False), and whether its backbone's weights are no longer those backbone.name loads. None: read
    # from `folder`.
    weights: tuple | None = None
    backbone_changed: bool = False


def in_memory(model, name: str) -> InitSource:
    """A start held in memory: `model`'s weights (a model an earlier stage of this run trained, named `name` in the
    run's record), from which a later stage's model is built as from a folder (`build_model`), without one."""
    backbone = {k: v.detach().cpu().clone() for k, v in model.backbone.state_dict().items()}
    head = {k: v.clone() for k, v in model.head_state().items()}
    return InitSource(name, None, model.settings, weights=(backbone, head, False),
                      backbone_changed=model.backbone_weights_changed)


def open_init_from(recipe) -> InitSource | None:
    """The model `recipe.train.init_from` names, checked without loading its weights: it exists, is a longbert model
    folder or a run folder, has the recipe's labels (when the recipe names them; else `build_model` checks the
    data's) and a backbone of the same architecture as backbone.name. None without init_from. Each problem is one
    LongbertError line naming the path."""
    path = recipe.train.init_from
    if path is None:
        return None
    where = Path(path).expanduser()
    if not where.is_dir():
        problem = "is a file" if where.exists() else "does not exist"
        raise LongbertError(f"{FIELD}: {path} {problem}; it must be an earlier run folder or a saved model folder")
    if not (where / CONFIG_FILE).is_file() and not (where / BEST / CONFIG_FILE).is_file():
        raise LongbertError(f"{FIELD}: {path} is not a longbert run folder or model folder (no {CONFIG_FILE} in it "
                            "or in its best/)")
    try:
        folder, settings = open_model_folder(where)
        source = InitSource(path, folder, settings)
        earlier = backbone_config(str(folder / BACKBONE_DIR) if backbone_is_saved(settings) else settings.backbone)
    except LongbertError as error:  # an incomplete or damaged folder, or a backbone reference that does not load
        raise LongbertError(f"{FIELD}: {error}") from None
    if recipe.data.label_names is not None:
        check_labels(source, recipe.data.label_names)
    new = backbone_config(recipe.backbone.name)
    differ = [f"{label} {getattr(earlier, key, None)} there, {getattr(new, key, None)} here"
              for key, label in ARCHITECTURE if getattr(earlier, key, None) != getattr(new, key, None)]
    if differ:
        raise LongbertError(f"{FIELD}: {path} has another backbone architecture than backbone.name "
                            f"{recipe.backbone.name} ({'; '.join(differ)}); its weights cannot start this run")
    return source


def backbone_config(name: str):
    """The transformers config of a backbone (a folder, `minilm` or a hub id), without its weights."""
    reference = resolve_backbone(name)
    with clear_load_errors(name, reference):
        return AutoConfig.from_pretrained(reference, trust_remote_code=False)


def check_labels(source: InitSource, label_names: list[str]) -> None:
    """The earlier model's classes must be this run's, in the same order (its head's rows are theirs)."""
    earlier = list(source.settings.label_names)
    if earlier != list(label_names):
        raise LongbertError(f"{FIELD}: {source.path} was trained on the labels {', '.join(earlier)}, and this run's "
                            f"are {', '.join(label_names)}; it can start only a run with the same labels in the same "
                            "order")


def build_model(recipe, label_names: list[str], loaded: tuple, source: InitSource | None):
    """(the model for `recipe`, what init_from loaded into it or None). Without a source, the model is
    `LongDocumentClassifier.from_recipe`'s; with one, the earlier model's weights replace the new ones where they
    fit (see the module's doc), and the report says how many tensors were loaded and which kept their new values."""
    if source is None:
        return LongDocumentClassifier.from_recipe(recipe, label_names, loaded=loaded), None
    check_labels(source, label_names)
    with torch.random.fork_rng(devices=[]):  # loading the earlier model draws nothing from the run's seeded stream
        earlier_backbone, earlier_head, merged = earlier_weights(source)
    into_backbone = load_fitting(loaded[0], earlier_backbone)  # before the strategy adapts the backbone
    lora = recipe.model.trains_lora
    # A LoRA run is built without adapters, loaded, then wrapped: the adapters sit on the loaded base weights.
    built = dataclasses.replace(recipe, model=dataclasses.replace(recipe.model, finetune="full")) if lora else recipe
    model = LongDocumentClassifier.from_recipe(built, label_names, loaded=loaded)
    into_backbone |= load_fitting(model.backbone, earlier_backbone)  # what fits only once adapted
    head = model.head_state()
    into_head = {k for k, v in earlier_head.items() if k in head and head[k].shape == v.shape}
    model.load_head_state({**head, **{k: earlier_head[k] for k in into_head}})
    # The earlier backbone's own weights (fine-tuned, pretrained, or LoRA merged), not its name's: saved with the model.
    changed = source.backbone_changed if source.weights is not None else backbone_is_saved(source.settings)
    model.backbone_weights_changed = bool(into_backbone) and (merged or changed)
    kept = ([f"backbone.{k}" for k in model.backbone.state_dict() if k not in into_backbone]
            + [k for k in head if k not in into_head])
    if lora:
        model.backbone = wrap_lora(model.backbone, recipe.model.lora, None, lora_modules_to_save(model.strategy))
        model.settings.finetune = "lora"
    report = {"path": source.path, "model": None if source.folder is None else str(source.folder),
              "strategy": source.settings.strategy.name, "merged_lora": merged,
              "loaded": len(into_backbone) + len(into_head),
              "head_loaded": all(k in into_head for k in head if k.startswith("head.")), "kept_new": kept}
    shown = f": {', '.join(kept[:6])}{', ...' if len(kept) > 6 else ''}" if kept else ""
    where = f"{FIELD}: {report['loaded']} tensors loaded from {source.folder}" if source.folder is not None else (
        f"{source.path}: {report['loaded']} tensors loaded from this run's {source.path}")
    model.notes.append(f"{where} (a {report['strategy']} model{', LoRA merged' if merged else ''}); {len(kept)} kept "
                       f"as initialised{shown}")
    return model, report


def earlier_weights(source: InitSource) -> tuple[dict, dict, bool]:
    """(the earlier model's backbone tensors, its strategy and head tensors, whether LoRA adapters were merged)."""
    if source.weights is not None:
        return source.weights
    earlier = LongDocumentClassifier.from_pretrained(source.folder)
    refuse_ensemble(earlier, str(source.folder), "train.init_from starts from one model: name one member's run")
    merged = earlier.settings.trains_lora
    backbone = earlier.backbone.merge_and_unload() if merged else earlier.backbone
    return {k: v.detach().cpu() for k, v in backbone.state_dict().items()}, earlier.head_state(), merged


def load_fitting(module, weights: dict) -> set[str]:
    """Load the tensors of `weights` whose name and shape `module` has; returns their names."""
    own = module.state_dict()
    fitting = {k: v for k, v in weights.items() if k in own and own[k].shape == v.shape}
    module.load_state_dict(fitting, strict=False)
    return set(fitting)
