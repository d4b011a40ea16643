"""Every strategy module, imported so that each registers itself. Add a new strategy's module here.

One file per strategy: truncate, chunk, sliding, bigbird, recurrence, rmt (chunk.py holds chunk's config and registers
sliding's module for it: chunks are sliding windows whose stride is their width). The contract, its optional hooks
(runtime-checkable Protocols) and the registry are in base.py. The pieces strategies share, each in a module named
for what it holds:
    windows.py    cutting documents into windows; laying out and running padded backbone passes (build_pass)
    pooling.py    every pooler: token states -> unit vector, unit vectors -> document vector (build_pooler)
    attention.py  putting a strategy's own attention into the backbone (install_attention; bigbird, recurrence)
    segments.py   reading a document segment by segment with a memory (read_segments; recurrence, rmt)
"""

from longbert.strategies import bigbird, chunk, recurrence, rmt, sliding, truncate  # noqa: F401
from longbert.strategies.base import REGISTRY, Strategy, get_entry, strategy_names  # noqa: F401
