"""The one shape every writing command returns to Python: where it wrote, what it measured, and the model a user
loads next.

    result = longbert.train(recipe)
    result.folder     # runs/imdb_sliding
    result.metrics    # what the folder's record holds (metrics.json), as a dict
    result.model      # runs/imdb_sliding/best: what `LongDocumentClassifier.from_pretrained` and `predict` read
    result.classifier # train only: the kept model itself, in memory

`train`, `pretrain`, `compare`, `make_ensemble` and `make_hybrid` return a `Result` (train and pretrain a subclass
that adds a typed field); the CLI prints from the same object.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    folder: Path  # what the command wrote: a run folder, a report folder, an ensemble's or a hybrid's folder
    metrics: dict  # what the folder's record file holds (metrics.json, results.json, the ensemble's summary...)
    model: Path | None = None  # the model folder to load next (a run's best/, an ensemble, a backbone); None: none
