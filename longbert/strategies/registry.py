"""The registry asked by name. Importing this module imports every strategy module, so that each has registered
itself (`base.register`) before a name is looked up. Add a new strategy's module to the import below."""

from __future__ import annotations

from torch import nn

from longbert.strategies import bigbird, chunk, recurrence, rmt, sliding, truncate  # noqa: F401  (each registers)
from longbert.strategies.base import REGISTRY, PassBudget, SpecialTokens, StrategyEntry
from longbert.strategies.configs import strategy_info, strategy_names, strategy_with_role  # noqa: F401  (asked here too)


def get_entry(name: str) -> StrategyEntry:
    """The registry entry for `name` (config and module), or a LongbertError listing the valid names."""
    strategy_info(name)  # an unknown name: the catalog's error
    if name not in REGISTRY:
        raise RuntimeError(f"strategy {name!r} is in configs.STRATEGIES but no module registered it")
    return REGISTRY[name]


def strategies_with(hook: type) -> list[str]:
    """The registered strategies whose module has `hook`, one of the Protocols above that hold only methods
    (`issubclass` cannot check an attribute such as SavesLoraModules' on a class)."""
    return [name for name in strategy_names() if issubclass(REGISTRY[name].module_cls, hook)]


def build_strategy(config, hidden_size: int, special: SpecialTokens, budget: PassBudget) -> nn.Module:
    """Instantiate the module registered for `config.name`."""
    entry = get_entry(config.name)
    return entry.module_cls(config, hidden_size=hidden_size, special=special, budget=budget)
