"""`train.reading`: how the end-to-end stage reads a document's units, so that fine-tuning a long document costs
what its deciding units cost rather than what all of them do (longbert.training.selective does it).

    grad_units      each document's top grad_units units by the pooler's current weights, plus random_units drawn
                    at random among the rest, go forward and backward with gradient; every other unit is read from a
                    cache of its last vector, filled without gradient the first time a document is met.
                    Pooling and the unit loss still see every unit. A document of at most grad_units + random_units
                    units is read whole, with gradient, as without this setting. null: every unit with gradient
    random_units    units drawn at random besides the top ones, so that a unit the pooler has not noticed yet can
                    still be learned
    refresh_epochs  every this many epochs the cache is read anew, every unit without gradient; 0: a cached vector
                    changes only when its unit is read with gradient
    frozen_layers   the backbone's embeddings and first frozen_layers layers stay as they are: their token states are
                    computed once per document and kept, so every epoch runs only the layers above
"""

from __future__ import annotations

from dataclasses import dataclass

from longbert.config.validation import Validated
from longbert.utils.fields import option


@dataclass
class ReadingConfig(Validated):
    SECTION = "train.reading"

    grad_units: int | None = option(None, "end-to-end stage: each document's top this many units by the pooler's "
                                    "weights (plus random_units) go forward and backward with gradient, the rest are "
                                    "read from a cache; null: every unit (chunk and sliding; other strategies read "
                                    "every unit)")
    random_units: int = option(1, "train.reading.grad_units: units drawn at random besides the top ones")
    refresh_epochs: int = option(1, "train.reading.grad_units: read every unit anew, without gradient, every this "
                                    "many epochs (1: each epoch after the first, which held the depth probe's "
                                    "accuracy where 0 lost 2.7 points, benchmarks/log.md); 0: a cached unit changes "
                                    "only when it is read with gradient")
    frozen_layers: int = option(0, "end-to-end stage: keep the backbone's embeddings and first this many layers "
                                   "as they are, their token states computed once per document and cached; 0: "
                                   "none (chunk, sliding and truncate)")
    max_cache_gb: float = option(8.0, "train.reading.frozen_layers: the most memory its cache of token states may "
                                      "take; a larger one is refused, with its size, before training")

    @property
    def selective(self) -> bool:
        """Whether anything here changes how the end-to-end stage reads (the defaults change nothing)."""
        return self.grad_units is not None or self.frozen_layers > 0

    def problems(self, path: str) -> list[str]:
        out = []
        if self.grad_units is not None and self.grad_units < 1:
            out.append(f"{path}.grad_units must be >= 1 or null, got {self.grad_units}")
        for name in ("random_units", "refresh_epochs", "frozen_layers"):
            if getattr(self, name) < 0:
                out.append(f"{path}.{name} must be >= 0, got {getattr(self, name)}")
        if not self.max_cache_gb > 0:
            out.append(f"{path}.max_cache_gb must be > 0, got {self.max_cache_gb}")
        return out
