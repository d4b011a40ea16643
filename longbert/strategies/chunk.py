"""`chunk`: cut the document into consecutive windows, encode each with its own [CLS]/[SEP], pool the chunk
vectors into one document vector (mean, max, learned attention, or a small transformer as in ToBERT).

Chunks are sliding windows that start where the previous one ended: this file holds chunk's own config (no stride
to set, its own defaults and help) and registers sliding's module for it, which reads `config.stride` as the
window. Recipes and saved model folders that say `name: chunk` load as they always did: the settings and the weight
names (`strategy.pooler.*`) are the same."""

from __future__ import annotations

from dataclasses import dataclass

from longbert.strategies.base import register
from longbert.strategies.sliding import SlidingStrategy, pooling_problems
from longbert.utils.fields import option


@dataclass
class ChunkConfig:
    name: str = "chunk"
    window: int = option(510, "content tokens per chunk ([CLS]/[SEP] come on top)")
    pooling: str = option("vote", "how chunk vectors become the document vector: mean, max, attention, gated, vote "
                                  "(attention's weights over each chunk's bounded vote) or transformer")
    token_pooling: str = option("auto", "chunk vector: cls ([CLS] state), mean (mean of token states), or auto: what "
                                        "the backbone's own pooling config says (mean for sentence-transformers "
                                        "models that mean-pool, cls otherwise)")
    unit_weights: str = option("new_tokens", "how mean pooling weighs the chunks: new_tokens (by the tokens each "
                                             "adds to those before it, so a short tail counts little) or equal")

    # What a key missing from a model saved before the key existed means (see ModelSettings.from_dict).
    ABSENT_MEANS = {"unit_weights": "equal"}

    @property
    def stride(self) -> int:
        """A chunk starts where the previous one ended. (A property, not a field: a recipe cannot set it, and saved
        settings do not hold it.)"""
        return self.window

    def problems(self, path: str) -> list[str]:
        out = [f"{path}.window must be >= 1, got {self.window}"] if self.window < 1 else []
        return out + pooling_problems(self, path)


register("chunk", ChunkConfig, "consecutive chunks of the whole document, chunk vectors pooled "
         "(mean/max/attention/transformer)", role="default")(SlidingStrategy)

# The module class that reads chunks, under the name it had when it was a class of its own (benchmarks use it).
ChunkStrategy = SlidingStrategy
