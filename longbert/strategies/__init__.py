"""How a long document reaches the backbone: one module per strategy, registered by name (registry.py imports them
all; add a new strategy's module there).

One file per strategy: truncate, chunk, sliding, bigbird, recurrence, rmt (chunk.py registers sliding's module for
chunk: chunks are sliding windows whose stride is their width). Their settings are in configs.py, without torch, so
that a recipe loads none of their code. The contract, its optional hooks (runtime-checkable Protocols) and
`register` are in base.py; the lookups by name in registry.py. The pieces
strategies share, each in a module named for what it holds:
    windows.py    cutting documents into windows; laying out and running padded backbone passes (build_pass)
    pooling.py    every pooler: token states -> unit vector, unit vectors -> document vector (build_pooler)
    attention.py  putting a strategy's own attention into the backbone (install_attention; bigbird, recurrence)
    segments.py   reading a document segment by segment with a memory (read_segments; recurrence, rmt)
"""
