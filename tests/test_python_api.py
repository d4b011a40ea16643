"""The Python API's names: the settings classes (a recipe's sections, each strategy's config) and the result shape
are exported from `longbert`, lazily, so that `import longbert` and building settings load no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import longbert
from longbert.strategies.registry import get_entry, strategy_names

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("Recipe", "DataConfig", "BackboneConfig", "ModelConfig", "LoraConfig", "TrainConfig", "EvalConfig")
STRATEGY_CONFIGS = ("TruncateConfig", "ChunkConfig", "SlidingConfig", "BigBirdConfig", "RecurrenceConfig",
                    "RmtConfig")


@pytest.mark.parametrize("name", SECTIONS + STRATEGY_CONFIGS + ("StrategyConfig", "Result", "TrainResult"))
def test_the_settings_and_result_classes_are_exported(name):
    assert name in longbert.__all__ and name in dir(longbert)
    assert getattr(longbert, name).__name__ == name


def test_every_registered_strategys_config_is_exported():
    exported = {getattr(longbert, name) for name in STRATEGY_CONFIGS}
    assert exported == {get_entry(name).config_cls for name in strategy_names()}
    assert all(isinstance(config(), longbert.StrategyConfig) for config in exported)
    assert longbert.strategy_names() == strategy_names()


def test_building_a_recipe_from_the_package_loads_no_torch():
    code = ("import sys, longbert\n"
            "longbert.TrainConfig(epochs=2), longbert.DataConfig(path='reviews.csv')\n"
            "print(sorted(m for m in sys.modules if m in ('torch', 'transformers') or m.startswith('longbert.strat')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert loaded.strip() == "['longbert.strategies', 'longbert.strategies.configs']", "the settings, no strategy code"


def test_a_train_result_is_the_one_result_shape():
    assert issubclass(longbert.TrainResult, longbert.Result)
    assert issubclass(longbert.PretrainResult, longbert.Result)
