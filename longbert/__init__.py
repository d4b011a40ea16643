"""longbert: classify long documents with BERT.

    import longbert
    recipe = longbert.load_recipe("imdb_quick", ["train.epochs=1"])    # a YAML recipe, as the CLI reads it
    recipe = longbert.Recipe(strategy=longbert.ChunkConfig(pooling="max"),
                             train=longbert.TrainConfig(epochs=1))      # or built in Python, checked as it is built
    result = longbert.train(recipe, train_dataset=(texts, labels))    # documents in memory, or the recipe's data.path
    result.folder, result.metrics, result.model                        # run folder, metrics.json, <folder>/best
    model = longbert.LongDocumentClassifier.from_pretrained(result.model)
    longbert.evaluate(model, (test_texts, test_labels))               # metrics dict; writes nothing
    longbert.evaluate(result.folder, "test")                           # a run's split; written to the run folder
    longbert.train(recipe, model=model, train_dataset=more)            # fine-tune a model further
    model.predict(["a long review ..."])                               # [{'label': 'pos', 'probabilities': {...}}]
    longbert.pretrain("pretrain_imdb_cpu")                             # continued MLM pretraining -> result.model

    from transformers import pipeline                                  # a saved model is a transformers model too:
    pipeline("text-classification", model=str(result.model))("a long review ...")

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
    "DataConfig": ("longbert.config", "DataConfig"),
    "BackboneConfig": ("longbert.config", "BackboneConfig"),
    "ModelConfig": ("longbert.config", "ModelConfig"),
    "LoraConfig": ("longbert.config", "LoraConfig"),
    "TrainConfig": ("longbert.config", "TrainConfig"),
    "EvalConfig": ("longbert.config", "EvalConfig"),
    "StrategyConfig": ("longbert.config", "StrategyConfig"),
    "TruncateConfig": ("longbert.strategies.configs", "TruncateConfig"),
    "ChunkConfig": ("longbert.strategies.configs", "ChunkConfig"),
    "SlidingConfig": ("longbert.strategies.configs", "SlidingConfig"),
    "BigBirdConfig": ("longbert.strategies.configs", "BigBirdConfig"),
    "RecurrenceConfig": ("longbert.strategies.configs", "RecurrenceConfig"),
    "RmtConfig": ("longbert.strategies.configs", "RmtConfig"),
    "Result": ("longbert.result", "Result"),
    "train": ("longbert.training.trainer", "train"),
    "Trainer": ("longbert.training.trainer", "Trainer"),
    "TrainResult": ("longbert.training.run_record", "TrainResult"),
    "evaluate": ("longbert.evaluation.evaluate", "evaluate"),
    "compare": ("longbert.comparison.orchestrator", "compare"),
    "LongDocumentClassifier": ("longbert.modeling.classifier", "LongDocumentClassifier"),
    "LongbertConfig": ("longbert.modeling.hf_config", "LongbertConfig"),
    "LongbertForSequenceClassification": ("longbert.hf.model", "LongbertForSequenceClassification"),
    "strategy_names": ("longbert.strategies.configs", "strategy_names"),
    "LongbertError": ("longbert.errors", "LongbertError"),
    "pretrain": ("longbert.training.pretraining.pretrain", "pretrain"),
    "make_hybrid": ("longbert.ensembles.hybrid", "make_hybrid"),
    "make_ensemble": ("longbert.ensembles.ensemble_folder", "make_ensemble"),
    "set_verbosity": ("longbert.utils.logs", "set_verbosity"),
    "get_verbosity": ("longbert.utils.logs", "get_verbosity"),
    "load_pretrain_recipe": ("longbert.config", "load_pretrain_recipe"),
    "PretrainRecipe": ("longbert.config", "PretrainRecipe"),
    "PretrainResult": ("longbert.training.pretraining.pretrain", "PretrainResult"),
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
