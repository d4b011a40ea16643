"""longbert: classify long documents with BERT.

    import longbert
    recipe = longbert.load_recipe("recipes/imdb_quick.yaml", ["train.epochs=1"])
    result = longbert.train(recipe)                       # run folder, metrics
    longbert.evaluate(result.run_dir, "test")             # metrics dict (also written to the run folder)
    model = longbert.LongDocumentClassifier.from_pretrained(result.run_dir)
    model.predict(["a long review ..."])                  # [{'label': 'pos', 'probabilities': {...}}]

Imports stay light: torch and transformers load when a name that needs them is first used.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_LAZY = {
    "load_recipe": ("longbert.config", "load_recipe"),
    "Recipe": ("longbert.config", "Recipe"),
    "train": ("longbert.training", "train"),
    "TrainResult": ("longbert.training", "TrainResult"),
    "evaluate": ("longbert.evaluation", "evaluate"),
    "compare": ("longbert.comparison", "compare"),
    "LongDocumentClassifier": ("longbert.model", "LongDocumentClassifier"),
    "strategy_names": ("longbert.strategies.base", "strategy_names"),
    "LongbertError": ("longbert.errors", "LongbertError"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'longbert' has no attribute {name!r}")
