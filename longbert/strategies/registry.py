"""The registry asked by name. Importing this module imports every strategy module, so that each has registered
itself (`base.register`) before a name is looked up. Add a new strategy's module to the import below."""

from __future__ import annotations

from torch import nn

from longbert.errors import LongbertError
from longbert.strategies import bigbird, chunk, recurrence, rmt, sliding, truncate  # noqa: F401  (each registers)
from longbert.strategies.base import REGISTRY, PassBudget, SpecialTokens, StrategyEntry


def strategy_with_role(role: str) -> str:
    """The name of the strategy registered with `role` ("default" or "reference")."""
    names = [e.name for e in REGISTRY.values() if e.role == role]
    if len(names) != 1:
        raise RuntimeError(f"exactly one strategy must be registered with role {role!r}, found {names}")
    return names[0]


def get_entry(name: str) -> StrategyEntry:
    """The registry entry for `name`, or a LongbertError listing the valid names."""
    if name not in REGISTRY:
        raise LongbertError(f"unknown strategy {name!r}; valid strategies: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def strategy_names() -> list[str]:
    return sorted(REGISTRY)


def strategies_with(hook: type) -> list[str]:
    """The registered strategies whose module has `hook`, one of the Protocols above that hold only methods
    (`issubclass` cannot check an attribute such as SavesLoraModules' on a class)."""
    return [name for name in strategy_names() if issubclass(REGISTRY[name].module_cls, hook)]


def build_strategy(config, hidden_size: int, special: SpecialTokens, budget: PassBudget) -> nn.Module:
    """Instantiate the module registered for `config.name`."""
    entry = get_entry(config.name)
    return entry.module_cls(config, hidden_size=hidden_size, special=special, budget=budget)
