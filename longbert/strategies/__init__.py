"""Every strategy module, imported so that each registers itself. Add a new strategy's module here."""

from longbert.strategies import bigbird, chunk, recurrence, rmt, sliding, truncate  # noqa: F401
from longbert.strategies.base import REGISTRY, Strategy, get_entry, strategy_names  # noqa: F401
