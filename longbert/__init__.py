"""longbert: classify long documents with BERT.

    import longbert
    recipe = longbert.load_recipe("recipes/imdb_quick.yaml", ["train.epochs=1"])
    result = longbert.train(recipe)                       # run folder, metrics
    longbert.evaluate(result.run_dir, "test")             # metrics dict (also written to the run folder)
    model = longbert.LongDocumentClassifier.from_pretrained(result.run_dir)
    model.predict(["a long review ..."])                  # [{'label': 'pos', 'probabilities': {...}}]
    longbert.pretrain("pretrain_imdb_cpu")                # continued MLM pretraining -> result.backbone_dir

    from transformers import pipeline                     # a saved model is a transformers model too:
    pipeline("text-classification", model=str(result.run_dir / "best"))("a long review ...")

Imports stay light: torch and transformers load when a name that needs them is first used. `import longbert` only
installs an import hook (longbert.hf.hook) that registers longbert's model type with transformers' Auto classes when
transformers loads them.
"""

from __future__ import annotations

import importlib

from longbert.hf import hook as hf_hook

__version__ = "0.1.0"

_LAZY = {
    "load_recipe": ("longbert.config", "load_recipe"),
    "Recipe": ("longbert.config", "Recipe"),
    "train": ("longbert.training.finetune", "train"),
    "TrainResult": ("longbert.training.finetune", "TrainResult"),
    "evaluate": ("longbert.evaluation.command", "evaluate"),
    "compare": ("longbert.comparison.run", "compare"),
    "LongDocumentClassifier": ("longbert.modeling.classifier", "LongDocumentClassifier"),
    "LongbertConfig": ("longbert.modeling.hf_config", "LongbertConfig"),
    "LongbertForSequenceClassification": ("longbert.hf.model", "LongbertForSequenceClassification"),
    "strategy_names": ("longbert.strategies.base", "strategy_names"),
    "LongbertError": ("longbert.errors", "LongbertError"),
    "pretrain": ("longbert.training.pretrain", "pretrain"),
    "make_hybrid": ("longbert.training.hybrid", "make_hybrid"),
    "make_ensemble": ("longbert.comparison.ensemble_folder", "make_ensemble"),
    "set_verbosity": ("longbert.utils.logs", "set_verbosity"),
    "get_verbosity": ("longbert.utils.logs", "get_verbosity"),
    "load_pretrain_recipe": ("longbert.config", "load_pretrain_recipe"),
    "PretrainRecipe": ("longbert.config", "PretrainRecipe"),
    "PretrainResult": ("longbert.training.pretrain", "PretrainResult"),
}

__all__ = sorted(_LAZY) + ["__version__"]

hf_hook.install()


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'longbert' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazy API too, so that dir(longbert) and tab completion find it (PEP 562), without loading it."""
    return sorted(set(globals()) | set(_LAZY))
