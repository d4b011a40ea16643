"""`chunk`: cut the document into consecutive windows, encode each with its own [CLS]/[SEP], pool the chunk
vectors into one document vector (mean, max, learned attention, or a small transformer as in ToBERT).

Chunks are sliding windows that start where the previous one ended: chunk has its own config (configs.ChunkConfig: no
stride to set, its own defaults and help), and this file registers sliding's module for it, which reads
`config.stride` as the window. Recipes and saved model folders that say `name: chunk` load as they always did: the
settings and the weight names (`strategy.pooler.*`) are the same."""

from __future__ import annotations

from longbert.strategies.base import register
from longbert.strategies.sliding import SlidingStrategy

register("chunk")(SlidingStrategy)

# The module class that reads chunks, under the name it had when it was a class of its own (benchmarks use it).
ChunkStrategy = SlidingStrategy
