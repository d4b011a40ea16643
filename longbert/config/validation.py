"""Settings checked the same way however they are made. From plain data (a YAML recipe, a saved model's settings),
`build` fills a dataclass and collects every problem with its YAML path. In Python, a `Validated` dataclass (a recipe,
each of its sections, a strategy's config; the machinery is longbert.utils.checked's) checks itself when it is
constructed, and again through `dataclasses.replace`. Either way one LongbertError names every problem.

    Recipe(train=TrainConfig(epochs=0))   # LongbertError: recipe: train.epochs must be >= 1, got 0
    ChunkConfig(window=0)                 # LongbertError: recipe: strategy.window must be >= 1, got 0

A recipe's strategy is named by `strategy.name`: its config class comes from longbert.strategies.configs, which
holds every strategy's settings without torch.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from longbert.errors import LongbertError
from longbert.strategies.configs import config_class, strategy_with_role
from longbert.utils.checked import (  # noqa: F401  (the machinery's names, as config/ has always imported them)
    RECIPE,
    StrategyConfig,
    Validated,
    building,
    field_types,
    one_line,
    settings_problems,
    short_repr,
    type_problem,
)


class RecipeCompletion(Validated):
    """What a recipe of either kind (`Recipe`, `PretrainRecipe`) fills in when it is built, and how it is given back
    as plain data: the strategy (the default one when none is named; a name, or a mapping as YAML gives it, becomes
    that strategy's config), runs/<name> when no output_dir is."""

    def __post_init__(self):
        found: list[str] = []
        if self.strategy is None:
            self.strategy = default_strategy_config()
        elif isinstance(self.strategy, (str, dict)):
            self.strategy = build_strategy_config(self.strategy, "strategy", found)
        if self.output_dir is None and isinstance(self.name, str):
            self.output_dir = str(Path("runs") / self.name)
        self.check(found)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)



def build(cls: type, raw: Any, path: str, problems: list[str]):
    """Build dataclass `cls` from a mapping, appending every problem (with its YAML path) to `problems`."""
    with building():
        obj = _build(cls, raw, path, problems)
    if obj is not None and hasattr(obj, "problems"):
        problems.extend(obj.problems(path))
    return obj if obj is not None else _default(cls)


def _default(cls: type):
    with building():
        return cls()


def _build(cls: type, raw: Any, path: str, problems: list[str]):
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        problems.append(f"{path or 'the recipe'} must be a mapping, got {short_repr(raw)}")
        return None
    hints = field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in [k for k in raw if k not in fields]:
        where = f"{path}.{key}" if path else key
        problems.append(f"unknown recipe key {short_repr(where)}; valid keys{' in ' + path if path else ''}: "
                        f"{', '.join(fields)}")
    values = {}
    for key, value in raw.items():
        if key not in fields:
            continue
        where = f"{path}.{key}" if path else key
        annotation = hints[key]
        if key == "strategy" and annotation in (Any, StrategyConfig):  # a recipe's (or a saved model's) strategy
            values[key] = build_strategy_config(value, where, problems)
        elif dataclasses.is_dataclass(annotation):
            values[key] = build(annotation, value, where, problems)
        else:
            converted, problem = type_problem(value, annotation, where)
            if problem:
                problems.append(problem)
            else:
                values[key] = converted
    return cls(**values)


def default_strategy_config():
    """The config (with its defaults) of the strategy with the default role: a recipe's strategy when it names
    none."""
    return config_class(strategy_with_role("default"))()


def build_strategy_config(raw: Any, path: str, problems: list[str]):
    """The strategy section: `name` selects the registered config dataclass, the other keys fill it. A bare name
    stands for that strategy's defaults."""
    if isinstance(raw, str):
        raw = {"name": raw}
    if isinstance(raw, dict) and "name" not in raw:  # `--set strategy.window=254` alone: the default strategy's field
        raw = {"name": default_strategy_config().name, **raw}
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"{path} must be a mapping with a `name` (one of `longbert strategies`), got {short_repr(raw)}")
        return default_strategy_config()
    try:
        config_cls = config_class(raw["name"])
    except LongbertError as error:
        problems.append(f"{path}.name: {error}")
        return default_strategy_config()
    return build(config_cls, raw, path, problems)
